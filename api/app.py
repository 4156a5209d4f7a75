"""The FastAPI application: one running system (Service + Celery dispatch, and the in-process
worker in embedded mode) per process, the routers, and a sweeper thread that moves batches along."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from api import errors
from api.metrics import StoreCollector
from api.routes import batches, chat, files, jobs, metrics, models
from conductor.app.api_service import ApiService
from conductor.app.batches import Batches
from conductor.app.service import Service
from conductor.app.webhooks import batch_event
from conductor.config.settings import Settings

log = logging.getLogger("conductor.api")


class Sweeper:
    """Finalizes and expires batches every `interval` seconds; `on_finished` gets each finished batch id."""

    def __init__(self, batches: Batches, interval: float, on_finished: Callable[[str], None] | None = None) -> None:
        self.batches = batches
        self.interval = interval
        self.on_finished = on_finished
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="batch-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                for batch_id in self.batches.sweep():
                    if self.on_finished:
                        self.on_finished(batch_id)
            except Exception:  # the next sweep retries; one bad batch must not stop the thread
                log.exception("batch sweep failed")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def create_app(settings: Settings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from conductor.cli.common import running_system

        with running_system(settings) as sysm:
            app.state.api = ApiService(sysm.service)
            app.state.batches = Batches(sysm.service)
            app.state.pool_name = settings.pool_file.stem if settings.pool_file else "local"
            app.state.started = int(time.time())
            app.state.registry = CollectorRegistry()
            app.state.registry.register(StoreCollector(sysm.runtime))
            sweeper = Sweeper(app.state.batches, settings.batch_sweep_s, _batch_webhook(sysm.service)).start()
            try:
                yield
            finally:
                sweeper.stop()

    app = FastAPI(
        title="conductor",
        version="1",
        summary="An OpenAI-compatible API over the Conductor job queue, with native jobs.",
        lifespan=lifespan,
    )
    errors.install(app)
    for router in (models.router, chat.router, jobs.router, files.router, batches.router, metrics.router):
        app.include_router(router)
    return app


def _batch_webhook(service: Service) -> Callable[[str], None]:
    """Send a finished batch's webhook through the same Celery app the service submits jobs with."""
    from tasks.webhooks import send_webhook

    celery_app = service.submitter.app  # type: ignore[attr-defined]  # the Dispatcher's app

    def notify(batch_id: str) -> None:
        send_webhook(celery_app, batch_event(service.rt.sessions, batch_id))

    return notify
