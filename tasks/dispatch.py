"""The one dispatcher: turns `Effects` into Celery messages, after the transaction that made them.

Task ids are deterministic (`plan-<round>`, `score-<job>`, ...) so a duplicate is recognisable.
The service gets this object as its `Submitter`; nothing else sends pipeline work.
"""

from __future__ import annotations

from celery import Celery

from conductor.domain.effects import Effects
from tasks.names import TaskName


class Dispatcher:
    def __init__(self, app: Celery) -> None:
        self.app = app

    def __call__(self, eff: Effects) -> None:
        sends: list[tuple[TaskName, str, list[str] | list[int]]] = [
            (TaskName.SOLVE, "solve", eff.solve),
            (TaskName.PLAN, "plan", eff.plans),
            (TaskName.REPLAN, "replan", eff.replans),
            (TaskName.RUN_STEP, "step", eff.steps),
            (TaskName.FINALIZE, "finalize", eff.finalize),
            (TaskName.SCORE, "score", eff.score),
        ]
        for name, prefix, ids in sends:
            for key in ids:
                self.app.send_task(name.value, args=[key], task_id=f"{prefix}-{key}")

    def submit(self, job_ids: list[str]) -> None:
        """Start these jobs (the service's `Submitter`)."""
        self(Effects(solve=list(job_ids)))
