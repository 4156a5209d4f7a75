"""Cancelling jobs while workers run them: no new model call starts, running (and delegated) steps
end as cancelled, and the state is recorded in short transactions that do not deadlock with the
other transitions.

Every transition locks one job's rows in the order step, its round, the round's other steps, the
chain, the job (`conductor.engine.transitions`). A cancel that took the job rows first and the steps
last met worker transitions head on: under load PostgreSQL picked it as the deadlock victim on
every retry and the API answered 500. Here each chunk of jobs takes its locks in the engine's
order, each kind of row in id order, and only then writes. What still ends in a deadlock (the
engine's own rarer orders, the feeder admitting the same jobs) runs again after a short pause.

Late results need nothing more: the engine's updates are guarded by status, so a step, plan or
chain result that arrives after the cancel finds its row ended and is dropped, and `finalize`
closes only running jobs.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import ColumnElement, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from conductor.domain.states import TERMINAL_JOB, ChainStatus, JobStatus, RoundStatus, StepStatus
from conductor.store.models import Chain, Job, Round, Step, utcnow

CANCELLED_ERROR = "cancelled by the client"
#: Jobs per transaction: a chunk's locks are held for milliseconds, not for a whole batch.
CHUNK = 100
#: Passes over rows written while a cancel waited for its locks; each pass ends their parents.
SWEEPS = 5
#: deadlock_detected, serialization_failure: the transaction was rolled back and may simply run again.
RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})

_LIVE_STEPS = [s.value for s in (StepStatus.PENDING, StepStatus.READY, StepStatus.RUNNING, StepStatus.DELEGATED)]
_STARTED_STEPS = [StepStatus.RUNNING.value, StepStatus.DELEGATED.value]
_LIVE_ROUNDS = [RoundStatus.PLANNING.value, RoundStatus.RUNNING.value]
_TERMINAL = [s.value for s in TERMINAL_JOB]


@dataclass
class _Live:
    """A chunk's unfinished steps, rounds and chains, locked."""

    steps: list[int]
    rounds: list[int]
    chains: list[int]

    def __len__(self) -> int:
        return len(self.steps) + len(self.rounds) + len(self.chains)


def cancel_jobs(sessions: sessionmaker[Session], job_ids: Sequence[str], *, attempts: int = 8) -> int:
    """Cancel the unfinished ones among `job_ids`, a chunk per transaction; returns how many this
    call cancelled. Idempotent: a job that already ended keeps its state; under a cancelled one,
    whatever is still unfinished is ended again."""
    ordered = sorted(set(job_ids))
    return sum(_cancel_chunk(sessions, ordered[i : i + CHUNK], attempts) for i in range(0, len(ordered), CHUNK))


def _cancel_chunk(sessions: sessionmaker[Session], job_ids: list[str], attempts: int) -> int:
    cancelled = _retrying(partial(_cancel_once, sessions, job_ids), attempts)
    # While the cancel waited for a job row, a transition may have written a plan's steps or a
    # job's first round; locking those after the job rows would invert the engine's order. They
    # are ended here, in transactions of their own, before the caller is told the jobs ended.
    for _ in range(SWEEPS):
        if not _retrying(partial(_sweep, sessions, job_ids), attempts):
            break
    return cancelled


def _retrying(run: Callable[[], int], attempts: int) -> int:
    """`run()`, again after a deadlock or serialization failure, with a short jittered backoff."""
    for attempt in range(1, attempts + 1):
        try:
            return run()
        except DBAPIError as exc:
            if attempt == attempts or getattr(exc.orig, "sqlstate", None) not in RETRYABLE_SQLSTATES:
                raise
            # Jitter: two transactions that collided must not collide again on the same schedule.
            time.sleep(min(0.02 * 2**attempt, 1.0) * random.uniform(0.5, 1.0))
    raise AssertionError("unreachable")


def _cancel_once(sessions: sessionmaker[Session], job_ids: list[str]) -> int:
    with sessions.begin() as s:
        live = _lock_live(s, job_ids)
        jobs = _lock(s, Job.id, Job.id.in_(job_ids), Job.status.not_in(_TERMINAL))
        if not jobs:
            return 0
        t = utcnow()
        _end(s, live, jobs, t)
        s.execute(
            update(Job)
            .where(Job.id.in_(jobs))
            .values(status=JobStatus.CANCELLED.value, error=CANCELLED_ERROR, finished_at=t)
        )
    return len(jobs)


def _sweep(sessions: sessionmaker[Session], job_ids: list[str]) -> int:
    """End what is still unfinished under the cancelled ones among `job_ids`; how many rows."""
    with sessions.begin() as s:
        jobs = list(s.scalars(select(Job.id).where(Job.id.in_(job_ids), Job.status == JobStatus.CANCELLED.value)))
        live = _lock_live(s, jobs)
        _end(s, live, jobs, utcnow())
    return len(live)


def _lock_live(s: Session, job_ids: list[str]) -> _Live:
    return _Live(
        steps=_lock(s, Step.id, Step.job_id.in_(job_ids), Step.status.in_(_LIVE_STEPS)),
        rounds=_lock(s, Round.id, Round.job_id.in_(job_ids), Round.status.in_(_LIVE_ROUNDS)),
        chains=_lock(s, Chain.id, Chain.job_id.in_(job_ids), Chain.status == ChainStatus.RUNNING.value),
    )


def _end(s: Session, live: _Live, job_ids: list[str], t: datetime) -> None:
    """End the locked rows that belong to `job_ids` (not those of a job that ended meanwhile)."""
    steps = Step.id.in_(live.steps) & Step.job_id.in_(job_ids)
    s.execute(
        update(Step)
        .where(steps, Step.status.in_(_STARTED_STEPS))
        .values(status=StepStatus.CANCELLED.value, error=CANCELLED_ERROR, finished_at=t, lease_until=None)
    )
    s.execute(
        update(Step)
        .where(steps, Step.status.in_([StepStatus.PENDING.value, StepStatus.READY.value]))
        .values(status=StepStatus.SKIPPED.value)
    )
    s.execute(
        update(Round)
        .where(Round.id.in_(live.rounds), Round.job_id.in_(job_ids))
        .values(status=RoundStatus.FAILED.value, error=CANCELLED_ERROR, finished_at=t, lease_until=None)
    )
    s.execute(
        update(Chain)
        .where(Chain.id.in_(live.chains), Chain.job_id.in_(job_ids))
        .values(status=ChainStatus.FAILED.value, error=CANCELLED_ERROR, finished_at=t)
    )


def _lock(s: Session, id_: InstrumentedAttribute[Any], *where: ColumnElement[bool]) -> list[Any]:
    """Ids of the matching rows, locked in id order. NO KEY UPDATE: a worker inserting a row that
    refers to a locked one (its foreign key takes a KEY SHARE lock) is not held up by it."""
    return list(s.scalars(select(id_).where(*where).order_by(id_).with_for_update(key_share=True)))
