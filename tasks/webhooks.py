"""The webhook task: one signed delivery attempt per run, retried with exponential backoff.

Sent only after the commit that finished the job or batch; a receiver that is down or slow
costs one short, time-limited attempt per retry on the `default` queue and blocks nothing else.
"""

from __future__ import annotations

from celery import Celery, Task

from conductor.app.runtime import Runtime
from conductor.app.webhooks import deliver, job_event

WEBHOOK_TASK = "conductor.webhook"


def register_webhooks(app: Celery, runtime: Runtime) -> None:
    @app.task(name=WEBHOOK_TASK, bind=True, shared=False, max_retries=None, acks_late=True)  # type: ignore[untyped-decorator]
    def webhook(self: Task, delivery_id: str) -> None:
        delay = deliver(runtime.sessions, runtime.settings, delivery_id)
        if delay is not None:
            raise self.retry(countdown=delay)


def send_webhook(app: Celery, delivery_id: str | None) -> None:
    if delivery_id is not None:
        app.send_task(WEBHOOK_TASK, args=[delivery_id], queue="default")


def notify_job(app: Celery, runtime: Runtime, job_id: str) -> None:
    """After a finalize commit: the job's event, when it ended and has an endpoint (once per job)."""
    send_webhook(app, job_event(runtime.sessions, job_id))
