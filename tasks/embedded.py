"""An in-process Celery host on the memory:// transport: the embedded default, same tasks, same path."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

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

    With `reap_every_s` (and `periodic`: task name -> seconds, e.g. the batch sweep) it also plays
    beat's part: there is no separate beat process in the embedded mode, and without the reaper
    a task that died mid-step would leave its job running forever.
    """

    def __init__(
        self,
        app: Celery,
        *,
        concurrency: int = 4,
        loglevel: str = "WARNING",
        reap_every_s: float | None = None,
        periodic: Mapping[str, float] | None = None,
    ) -> None:
        self.app = app
        self.concurrency = concurrency
        self.loglevel = loglevel
        self.periodic = dict(periodic or {})
        if reap_every_s:
            self.periodic[TaskName.REAP.value] = reap_every_s
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
        if self.periodic:
            self._reaper = threading.Thread(target=self._reap_periodically, name="embedded-reaper", daemon=True)
            self._reaper.start()
        return self

    def _reap_periodically(self) -> None:
        due = {name: time.monotonic() + every for name, every in self.periodic.items()}
        while not self._stop_reaping.wait(max(0.0, min(due.values()) - time.monotonic())):
            for name, at in due.items():
                if at <= time.monotonic():
                    self.app.send_task(name)
                    due[name] = time.monotonic() + self.periodic[name]

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
