"""The Celery app: built from Settings (no module-level app), with its queues, routes and reliability knobs,
and its tasks registered over the process's parts (`conductor.runtime.Runtime`). Processes get theirs
from the composition root (`conductor.system.celery_app`)."""

from __future__ import annotations

from celery import Celery
from kombu import Exchange, Queue

from conductor import telemetry
from conductor.config.settings import Settings
from conductor.log_context import JOB_LOG_FORMAT
from conductor.runtime import Runtime
from tasks import job_logging
from tasks.names import QUEUES, ROUTES
from tasks.names import Queue as QueueName

__all__ = ["QUEUES", "ROUTES", "create_app"]


def create_app(settings: Settings, runtime: Runtime) -> Celery:
    telemetry.setup()  # every process that runs or sends pipeline work builds its app here
    app = Celery("conductor", broker=settings.broker_url, set_as_current=False)
    app.conf.update(
        task_queues=[Queue(q, Exchange(q, type="direct"), routing_key=q) for q in QUEUES],
        task_default_queue=QueueName.DEFAULT.value,
        task_routes=ROUTES,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,  # results live in SQL; no result backend to wait on
        # A Celery host that dies mid-task must not lose the message: ack only after the task ran,
        # and give the message back when the host process is killed.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=settings.task_time_limit_s,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            # A broker that went silent (a partition drops packets, no RST) must fail a publish or
            # a BRPOP in seconds, not hang the worker on a half-open socket.
            **({} if settings.embedded else settings.links.celery_transport_options()),
            # The in-memory transport polls; its 1 s default would add a second to every hop.
            **({"polling_interval": 0.02} if settings.embedded else {}),
        },
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=settings.connect_timeout_s,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        worker_log_format=JOB_LOG_FORMAT,  # the job id on every line a task writes (tasks.job_logging)
        # Task events (one Redis PUBLISH per task received/started/succeeded/sent) were ~8% of a
        # worker's time at zero model latency; Flower turns them on at run time (enable_events).
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
    )
    job_logging.connect()
    from tasks.pipeline import register

    register(app, runtime)
    return app
