"""The webhook task: one signed delivery attempt per run, retried with exponential backoff.

Sent only after the commit that finished the job or batch. The task itself only hands the
attempt to a small pool of sender threads (`webhook_senders` per process) and returns: a
receiver that is slow or never answers holds a sender thread for `webhook_timeout_s`, never a
worker thread that solve, plan, run_step or finalize need. A failed attempt schedules the next
one (countdown) from the sender thread. An attempt lost with its process leaves the delivery
`pending`: the reaper sends it again once it is overdue by `ready_grace_s` (`resend_overdue`), and
`POST /v1/webhooks/{id}/replay` sends any delivery again on demand.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

from celery import Celery, Task

from conductor.app.webhooks import deliver, job_event, overdue
from conductor.runtime import Runtime

WEBHOOK_TASK = "conductor.webhook"
log = logging.getLogger("conductor.webhooks")


class _Senders:
    """One lazily started thread pool per process (a Celery prefork child builds its own)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, fn: object, *args: object) -> None:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.size, thread_name_prefix="webhook-sender")
        self._pool.submit(fn, *args)  # type: ignore[arg-type]


def register_webhooks(app: Celery, runtime: Runtime) -> None:
    senders = _Senders(runtime.settings.webhook_senders)

    def attempt(delivery_id: str) -> None:
        try:
            delay = deliver(runtime.sessions, runtime.settings, delivery_id)
            if delay is not None:
                send_webhook(app, delivery_id, countdown=delay)
        except Exception:  # the delivery stays pending and replayable; nothing else is affected
            log.exception("webhook delivery %s: attempt failed", delivery_id)

    @app.task(name=WEBHOOK_TASK, bind=True, shared=False, acks_late=True)  # type: ignore[untyped-decorator]
    def webhook(self: Task, delivery_id: str) -> None:
        senders.submit(attempt, delivery_id)


def send_webhook(app: Celery, delivery_id: str | None, *, countdown: float | None = None) -> None:
    if delivery_id is not None:
        app.send_task(WEBHOOK_TASK, args=[delivery_id], queue="default", countdown=countdown)


def notify_job(app: Celery, runtime: Runtime, job_id: str) -> None:
    """After a finalize commit: the job's event, when it ended and has an endpoint (once per job)."""
    send_webhook(app, job_event(runtime.sessions, job_id))


def resend_overdue(app: Celery, runtime: Runtime) -> int:
    """The reaper's part: send again the pending deliveries whose process died with their attempt."""
    ids = overdue(runtime.sessions, runtime.settings)
    for delivery_id in ids:
        send_webhook(app, delivery_id)
    return len(ids)
