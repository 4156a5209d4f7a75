"""The one dispatcher: turns `Effects` into Celery messages, after the transaction that made them.

Task ids are deterministic (`plan-<round>`, `score-<job>`, ...) so a duplicate is recognisable, and
so a message found in a broker queue says which work it carries (`effects_of`: what the reaper
must not re-send while it waits there). The service gets this object as its `Submitter`; nothing
else sends pipeline work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from celery import Celery
from opentelemetry.trace import SpanContext

from conductor import telemetry
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
#: The app attribute `tasks.pipeline.register` sets: starts queued jobs in this process (`Engine.start_jobs`).
_STARTER = "conductor_start_jobs"
#: The app attribute set while tracing is on: each message's parent span (`tasks.tracing.message_parents`).
_PARENTS = "conductor_message_parents"

log = logging.getLogger(__name__)


def set_starter(app: Celery, start: Callable[[list[str]], Effects]) -> None:
    """Let every Dispatcher on `app` start jobs itself instead of sending `solve` messages."""
    setattr(app, _STARTER, start)


def set_message_parents(app: Celery, parents: Callable[[Effects], Mapping[str, SpanContext]]) -> None:
    """Let every Dispatcher on `app` carry each message's parent span in its `traceparent` header."""
    setattr(app, _PARENTS, parents)


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
        self.later(eff, None)

    def later(self, eff: Effects, countdown: float | None, *, handed_back: int = 0) -> None:
        """Send `eff`'s work to run after `countdown` seconds (None: now); `handed_back`: the times
        it was already handed back (the message's retries, which bound the hand-backs)."""
        lookup: Callable[[Effects], Mapping[str, SpanContext]] | None = getattr(self.app, _PARENTS, None)
        parents = lookup(eff) if lookup is not None and eff else {}
        for field, name, prefix in SENDS:
            for key in getattr(eff, field):
                task_id = f"{prefix}-{key}"
                self.app.send_task(
                    name.value,
                    args=[key],
                    task_id=task_id,
                    countdown=countdown,
                    retries=handed_back,
                    headers=telemetry.inject(parents.get(task_id)),
                )

    def submit(self, job_ids: list[str]) -> None:
        """Start these jobs (the service's `Submitter`).

        Where the app knows how (a pipeline app: `set_starter`), the jobs are started here, in one
        transaction, and their first plans or steps are sent: no `solve` hop through a queue and a
        worker on every job's critical path. If that start fails, or this process dies before it
        commits, the jobs stay queued: a `solve` message is sent instead, or the reaper sends one.
        """
        start: Callable[[list[str]], Effects] | None = getattr(self.app, _STARTER, None)
        if start is not None and job_ids:
            try:
                eff = start(list(job_ids))
            except Exception:
                log.warning("starting %d jobs here failed; sending solve instead", len(job_ids), exc_info=True)
            else:
                self(eff)
                return
        self(Effects(solve=list(job_ids)))
