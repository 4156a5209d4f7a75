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

from api import errors, ui
from api.metrics import StoreCollector
from api.routes import batches, chat, estimates, files, jobs, metrics, models, responses, webhooks
from conductor.app.api_service import ApiService
from conductor.app.batches import Batches
from conductor.app.service import Service
from conductor.app.webhooks import batch_event
from conductor.config.settings import Settings

log = logging.getLogger("conductor.api")


class Sweeper:
    """Every `interval` seconds: `admit` (the feeder lets waiting jobs in when nobody else did),
    then finalize and expire batches; `on_finished` gets each finished batch id."""

    def __init__(
        self,
        batches: Batches,
        interval: float,
        on_finished: Callable[[str], None] | None = None,
        admit: Callable[[], object] | None = None,
    ) -> None:
        self.batches = batches
        self.interval = interval
        self.on_finished = on_finished
        self.admit = admit
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="batch-sweeper", daemon=True)

    def start(self) -> Sweeper:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self.admit is not None:
                    self.admit()
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
            app.state.send_webhook = _webhook_sender(sysm.service)
            app.state.registry = CollectorRegistry()
            app.state.registry.register(StoreCollector(sysm.runtime))
            sweeper = Sweeper(
                app.state.batches, settings.batch_sweep_s, _batch_webhook(sysm.service), sysm.service.feeder.admit
            ).start()
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
    ui.install(app)
    for router in (
        models.router,
        chat.router,
        responses.router,
        jobs.router,
        estimates.router,
        files.router,
        batches.router,
        webhooks.router,
        metrics.router,
    ):
        app.include_router(router)
    return app


def _webhook_sender(service: Service) -> Callable[[str | None], None]:
    """Send a recorded delivery through the same Celery app the service submits jobs with."""
    from tasks.webhooks import send_webhook

    celery_app = service.submitter.app  # type: ignore[attr-defined]  # the Dispatcher's app

    def send(delivery_id: str | None) -> None:
        send_webhook(celery_app, delivery_id)

    return send


def _batch_webhook(service: Service) -> Callable[[str], None]:
    """A finished batch's event, recorded then sent."""
    send = _webhook_sender(service)

    def notify(batch_id: str) -> None:
        send(batch_event(service.rt.sessions, batch_id))

    return notify
