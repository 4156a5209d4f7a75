"""The FastAPI application: one running system (`conductor.system`: the Service, Celery dispatch,
and the in-process worker in embedded mode) per process, and the routers. The process keeps no work of its own: a
batch's input file is read, swept, expired and finalized by workers and beat, so killing the API
at any moment loses nothing."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable

from celery import Celery
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from api import errors, ui
from api.edge import BodyEdge
from api.metrics import StoreCollector
from api.routes import admin, batches, chat, estimates, files, jobs, metrics, models, responses, webhooks
from conductor.app.batches.batch_api import Batches
from conductor.app.estimate import estimate
from conductor.app.tenant_jobs import TenantJobs
from conductor.config.settings import Settings
from conductor.system import running_system
from reward_pipeline.rewards import record_feedback


def create_app(settings: Settings) -> FastAPI:
    # Request spans need nothing here: FastAPI's own telemetry makes a server span per request,
    # continuing the caller's W3C `traceparent`, once `conductor.telemetry.setup` has installed a
    # tracer provider (the running system's Celery app does, when an OTLP endpoint is configured);
    # a job submitted while handling it mints its trace under that span.
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        with running_system(settings, pull_model=True) as sysm:
            service = sysm.service
            app.state.api = TenantJobs(service, functools.partial(record_feedback, service.sessions))
            app.state.batches = Batches(service, _batch_work_sender(sysm.app))
            app.state.estimate = functools.partial(estimate, service.sessions, sysm.runtime.pool, settings)
            app.state.pool_name = settings.pool_file.stem if settings.pool_file else "local"
            app.state.started = int(time.time())
            app.state.send_webhook = _webhook_sender(sysm.app)
            app.state.registry = CollectorRegistry()
            app.state.registry.register(StoreCollector(service.sessions, settings.broker_url))
            yield

    app = FastAPI(
        title="conductor",
        version="1",
        summary="An OpenAI-compatible API over the Conductor job queue, with native jobs.",
        lifespan=lifespan,
    )
    errors.install(app)
    app.add_middleware(BodyEdge, settings=settings)
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
        admin.router,
    ):
        app.include_router(router)
    return app


def _webhook_sender(celery_app: Celery) -> Callable[[str | None], None]:
    """Send a recorded delivery through the same Celery app the service submits jobs with."""
    from tasks.webhooks import send_webhook

    def send(delivery_id: str | None) -> None:
        send_webhook(celery_app, delivery_id)

    return send


def _batch_work_sender(celery_app: Celery) -> Callable[[str, str], None]:
    """Send a batch's read (or finalize) to the workers; beat's sweep does the rest."""
    from tasks.batches import send_batch_work

    def send(kind: str, batch_id: str) -> None:
        send_batch_work(celery_app, kind, batch_id)

    return send
