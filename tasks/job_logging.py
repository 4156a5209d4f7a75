"""The job id on every log line a worker writes while it runs a task for that job.

Bound from Celery's `task_prerun` to its `task_postrun` rather than inside the task functions:
Celery logs a task's outcome ("Task conductor.plan[plan-12] succeeded in 0.05s", retries,
failures) after the function has returned, and those lines belong to the job too. Both signals
are sent in the thread that runs the task, and `task_postrun` is sent from a `finally`, so the
binding never outlives its task. The consumer's "received" line is written before the task
starts, in another thread, and carries no job id.

`connect()` also puts the job filter on the handlers Celery sets up, whose format
(`worker_log_format`, see `tasks.app`) writes the job label.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import Task
from celery.signals import after_setup_logger, after_setup_task_logger, task_postrun, task_prerun
from celery.utils.log import get_multiprocessing_logger

from conductor import log_context
from tasks.names import TaskName

#: Which id each task's first argument is.
_BOUND_BY = {
    TaskName.SOLVE.value: "job_id",
    TaskName.FINALIZE.value: "job_id",
    TaskName.SCORE.value: "job_id",
    TaskName.PLAN.value: "round_id",
    TaskName.REPLAN.value: "round_id",
    TaskName.RUN_STEP.value: "step_id",
}
_TOKEN = "conductor_log_token"


def _bind(task: Task | None = None, args: tuple[Any, ...] | list[Any] | None = None, **_: Any) -> None:
    field = _BOUND_BY.get(getattr(task, "name", ""))
    if task is not None and field is not None and args:
        setattr(task.request, _TOKEN, log_context.bind(**{field: args[0]}))


def _unbind(task: Task | None = None, **_: Any) -> None:
    token = getattr(task.request, _TOKEN, None) if task is not None else None
    if task is not None and token is not None:
        log_context.unbind(token)
        setattr(task.request, _TOKEN, None)


def _filter_handlers(logger: logging.Logger | None = None, **_: Any) -> None:
    # Celery gives the multiprocessing logger a handler with the root's format and no signal.
    for configured in (logger, get_multiprocessing_logger()):
        if configured is not None:
            log_context.install(configured.handlers)


def connect() -> None:
    """Connect the signals once per process (apps built later share them: the receivers look
    only at the task's name)."""
    task_prerun.connect(_bind, weak=False, dispatch_uid="conductor-job-log-bind")
    task_postrun.connect(_unbind, weak=False, dispatch_uid="conductor-job-log-unbind")
    after_setup_logger.connect(_filter_handlers, weak=False, dispatch_uid="conductor-job-log-root")
    after_setup_task_logger.connect(_filter_handlers, weak=False, dispatch_uid="conductor-job-log-task")
