"""An in-process Celery host on the memory:// transport: the embedded default, same tasks, same path."""

from __future__ import annotations

import threading

from celery import Celery
from celery.worker import WorkController

from tasks.names import QUEUES, TaskName


class _Controller(WorkController):
    def __init__(self, *args: object, **kwargs: object) -> None:
        self.ready = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: object) -> None:
        self.ready.set()


class EmbeddedWorker:
    """Runs a real Celery WorkController (thread pool) in a background thread of this process.

    With `reap_every_s` it also plays beat's part: there is no separate beat process in the
    embedded mode, and without the reaper a task that died mid-step would leave its job
    running forever.
    """

    def __init__(
        self, app: Celery, *, concurrency: int = 4, loglevel: str = "WARNING", reap_every_s: float | None = None
    ) -> None:
        self.app = app
        self.concurrency = concurrency
        self.loglevel = loglevel
        self.reap_every_s = reap_every_s
        self._controller: _Controller | None = None
        self._thread: threading.Thread | None = None
        self._stop_reaping = threading.Event()
        self._reaper: threading.Thread | None = None

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
            raise RuntimeError("embedded Celery host did not start")
        if self.reap_every_s:
            self._reaper = threading.Thread(target=self._reap_periodically, name="embedded-reaper", daemon=True)
            self._reaper.start()
        return self

    def _reap_periodically(self) -> None:
        assert self.reap_every_s is not None
        while not self._stop_reaping.wait(self.reap_every_s):
            self.app.send_task(TaskName.REAP.value)

    def stop(self) -> None:
        self._stop_reaping.set()
        if self._reaper is not None:
            self._reaper.join(timeout=5)
        if self._controller is not None:
            self._controller.stop(in_sighandler=False)
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self) -> EmbeddedWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
