"""Retention's beat task (default queue): removes the texts of jobs past `retention_days`
(`conductor.app.retention`); a run does a bounded amount, the next one goes on. The period is
beat's (sent with the task), so the worker that runs it need not be configured alike."""

from __future__ import annotations

import logging

from celery import Celery

from conductor.app.retention import run_retention
from conductor.runtime import Runtime
from tasks.names import TaskName

log = logging.getLogger(__name__)


def register_retention(app: Celery, runtime: Runtime) -> None:
    @app.task(name=TaskName.RETENTION.value, shared=False, ignore_result=True)  # type: ignore[untyped-decorator]
    def retention(retention_days: float | None = None) -> None:
        report = run_retention(runtime.sessions, runtime.settings, days=retention_days)
        log.info("retention: %s", report)
