"""Batch API work on workers (`conductor.app.batches`): reading an input file into jobs, writing a
finished batch's output files, and the sweep beat sends every `batch_sweep_s` (expire, claim,
re-send lost reads and finalizes). The API process only stores the upload and sends the read, so
an API restart in the middle of an upload or an expiry loses nothing."""

from __future__ import annotations

from celery import Celery, Task

from conductor.app.batches.batch_api import FINALIZE, READ, Batches
from conductor.app.batches.sweep import task_id
from conductor.app.webhooks import batch_event
from conductor.runtime import Runtime
from schedulers.broker import waiting_task_ids
from tasks.dispatch import Dispatcher
from tasks.names import QUEUES, TaskName
from tasks.services import service_for
from tasks.webhooks import send_webhook

_TASKS = {READ: TaskName.BATCH_READ, FINALIZE: TaskName.BATCH_FINALIZE}


def send_batch_work(app: Celery, kind: str, batch_id: str) -> None:
    """Send a batch's read or finalize; the task id names it, so beat can see it waiting in a queue."""
    app.send_task(_TASKS[kind].value, args=[batch_id], task_id=task_id(kind, batch_id))


def register_batches(app: Celery, runtime: Runtime, dispatch: Dispatcher) -> None:
    waiting = waiting_task_ids(
        runtime.settings.broker_url, QUEUES, limit=runtime.settings.broker_scan_limit, links=runtime.settings.links
    )
    _batches: list[Batches] = []

    def batches() -> Batches:
        if not _batches:  # built on first use: a worker process that never sees a batch needs none
            send = lambda kind, batch_id: send_batch_work(app, kind, batch_id)  # noqa: E731
            _batches.append(Batches(service_for(runtime, dispatch.submit), send))
        return _batches[0]

    @app.task(name=TaskName.BATCH_READ.value, bind=True, shared=False)  # type: ignore[untyped-decorator]
    def batch_read(self: Task, batch_id: str) -> None:
        batches().ingest(batch_id)

    @app.task(name=TaskName.BATCH_FINALIZE.value, bind=True, shared=False)  # type: ignore[untyped-decorator]
    def batch_finalize(self: Task, batch_id: str) -> None:
        if batches().finalize(batch_id):
            send_webhook(app, batch_event(runtime.sessions, batch_id))  # once: the delivery id is the event's

    @app.task(name=TaskName.BATCH_SWEEP.value, bind=True, shared=False)  # type: ignore[untyped-decorator]
    def batch_sweep(self: Task) -> None:
        batches().sweep(waiting())
        batches().service.admit()  # waiting batch lines keep flowing with no client following them
