"""The feeder's accounting of work admitted jobs will still put into the queues.

The broker's depth says what waits now; it cannot see the steps an admitted job will release once
its plan is written. Admitting against the depth alone lets a batch of fan-out plans fill the `llm`
queue far past `max_queue_depth` a few seconds later. So the feeder also reads, from the store,
the messages admitted work still owes: a solve per queued job, a plan per planning round, a message
per ready or pending step, and for each job or round that has no workflow yet the steps a plan
brings on average (measured over recent rounds; `max_steps` until there are any).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from conductor.domain.states import JobStatus, RoundStatus, StepStatus
from conductor.store.models import Job, Round, Step

#: Recent rounds that set the expected steps per plan.
RECENT_ROUNDS = 200


@dataclass(frozen=True)
class Backlog:
    messages: float  #: messages admitted work has in the queues or still to send (solve, plan, steps)
    per_job: float  #: what one more admitted job is expected to add


def pipeline_backlog(s: Session, *, default_steps: int) -> Backlog:
    recent = select(Round.n_steps).where(Round.n_steps > 0).order_by(Round.id.desc()).limit(RECENT_ROUNDS).subquery()
    steps_per_plan = float(s.scalar(select(func.avg(recent.c.n_steps))) or default_steps)
    queued, queued_samples = s.execute(
        select(func.count(), func.coalesce(func.sum(Job.samples), 0)).where(Job.status == JobStatus.QUEUED)
    ).one()
    planning = s.scalar(select(func.count()).select_from(Round).where(Round.status == RoundStatus.PLANNING)) or 0
    open_steps = (
        s.scalar(select(func.count()).select_from(Step).where(Step.status.in_([StepStatus.READY, StepStatus.PENDING])))
        or 0
    )
    samples = float(s.scalar(select(func.avg(Job.samples)).where(Job.status == JobStatus.WAITING)) or 1.0)
    per_plan = 1.0 + steps_per_plan
    return Backlog(
        messages=queued + (int(queued_samples) + planning) * per_plan + open_steps,
        per_job=1.0 + samples * per_plan,
    )
