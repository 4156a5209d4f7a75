"""An in-process Celery worker on the memory:// transport: the embedded default, same tasks, same path."""

from __future__ import annotations

import threading

from celery import Celery
from celery.worker import WorkController

from tasks.app import QUEUES


class _Controller(WorkController):
    def __init__(self, *args: object, **kwargs: object) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: object) -> None:
        self.ready.set()


class EmbeddedWorker:
    """Runs a real Celery WorkController (thread pool) in a background thread of this process."""

    def __init__(self, app: Celery, *, concurrency: int = 4, loglevel: str = "WARNING") -> None:
        self.app = app
        self.concurrency = concurrency
        self.loglevel = loglevel
        self._controller: _Controller | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> EmbeddedWorker:
        # Parts of the worker (the thread pool's task tracing) reach for the default app, not
        # the one passed in: without this, tasks are received and never run.
        self.app.finalize()
        self.app.set_current()
        self.app.set_default()
        self._controller = _Controller(
            app=self.app,
            pool="threads",
            concurrency=self.concurrency,
            queues=list(QUEUES),
            hostname=f"embedded@{threading.get_ident()}",
            loglevel=self.loglevel,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
        )
        self._thread = threading.Thread(target=self._controller.start, name="embedded-celery", daemon=True)
        self._thread.start()
        if not self._controller.ready.wait(timeout):
            raise RuntimeError("embedded Celery worker did not start")
        return self

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop(in_sighandler=False)
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self) -> EmbeddedWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
