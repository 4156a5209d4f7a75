"""The FastAPI application: one running system (Service + Celery dispatch, and the in-process
worker in embedded mode) per process, and the routers. The process keeps no work of its own: a
batch's input file is read, swept, expired and finalized by workers and beat, so killing the API
at any moment loses nothing."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from api import errors, ui
from api.metrics import StoreCollector
from api.routes import batches, chat, estimates, files, jobs, metrics, models, responses, webhooks
from conductor.app.api_service import ApiService
from conductor.app.batches.batch_api import Batches
from conductor.app.service import Service
from conductor.config.settings import Settings


def create_app(settings: Settings) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from conductor.cli.common import running_system

        with running_system(settings) as sysm:
            app.state.api = ApiService(sysm.service)
            app.state.batches = Batches(sysm.service, _batch_work_sender(sysm.service))
            app.state.pool_name = settings.pool_file.stem if settings.pool_file else "local"
            app.state.started = int(time.time())
            app.state.send_webhook = _webhook_sender(sysm.service)
            app.state.registry = CollectorRegistry()
            app.state.registry.register(StoreCollector(sysm.runtime))
            yield

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


def _batch_work_sender(service: Service) -> Callable[[str, str], None]:
    """Send a batch's read (or finalize) to the workers; beat's sweep does the rest."""
    from tasks.batches import send_batch_work

    celery_app = service.submitter.app  # type: ignore[attr-defined]  # the Dispatcher's app

    def send(kind: str, batch_id: str) -> None:
        send_batch_work(celery_app, kind, batch_id)

    return send
