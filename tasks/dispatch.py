"""The one dispatcher: turns `Effects` into Celery messages, after the transaction that made them.

Task ids are deterministic (`plan-<round>`, `score-<job>`, ...) so a duplicate is recognisable, and
so a message found in a broker queue says which work it carries (`effects_of`: what the reaper
must not re-send while it waits there). The service gets this object as its `Submitter`; nothing
else sends pipeline work.
"""

from __future__ import annotations

from collections.abc import Iterable

from celery import Celery

from conductor.domain.effects import Effects
from tasks.names import TaskName

#: Effects field, task, task id prefix. Job ids are strings, round and step ids integers.
SENDS: tuple[tuple[str, TaskName, str], ...] = (
    ("solve", TaskName.SOLVE, "solve"),
    ("plans", TaskName.PLAN, "plan"),
    ("replans", TaskName.REPLAN, "replan"),
    ("steps", TaskName.RUN_STEP, "step"),
    ("finalize", TaskName.FINALIZE, "finalize"),
    ("score", TaskName.SCORE, "score"),
)
_INT_KEYS = frozenset({"plans", "replans", "steps"})


def effects_of(task_ids: Iterable[str]) -> Effects:
    """The work the given task ids carry (ids of other tasks are ignored)."""
    by_prefix = {prefix: field for field, _, prefix in SENDS}
    eff = Effects()
    for task_id in task_ids:
        prefix, _, key = task_id.partition("-")
        field = by_prefix.get(prefix)
        if field is None or not key:
            continue
        if field in _INT_KEYS:
            if not key.isdigit():
                continue
            getattr(eff, field).append(int(key))
        else:
            getattr(eff, field).append(key)
    return eff


class Dispatcher:
    def __init__(self, app: Celery) -> None:
        self.app = app

    def __call__(self, eff: Effects) -> None:
        for field, name, prefix in SENDS:
            for key in getattr(eff, field):
                self.app.send_task(name.value, args=[key], task_id=f"{prefix}-{key}")

    def submit(self, job_ids: list[str]) -> None:
        """Start these jobs (the service's `Submitter`)."""
        self(Effects(solve=list(job_ids)))
