"""Recovery: find work whose task was lost (a killed Celery host, a lost message) and say what to re-send.

Lost is judged, never assumed from age alone. A job's, round's or step's message is re-sent when
(1) the interval since its last send has passed (`ResendPolicy`: `ready_grace_s` for a fresh
message, doubling with each re-send of the same thing), and (2) the broker does not hold it in a
queue (`waiting`: the task messages the caller found there; None where the broker cannot be
read, and then time alone decides). Each re-send is recorded on its row (`sent_at`, `sends`) in
the transaction that decides it, so a step waiting behind a long queue is never re-sent on every
sweep: at most once per doubling of its wait, and not at all while its message sits in the queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from conductor.domain.effects import Effects
from conductor.domain.resend import ResendPolicy, latest
from conductor.domain.states import JobStatus, RoundKind, RoundStatus, StepStatus
from conductor.engine.transitions import Transitions, now
from conductor.store import queries
from conductor.store.models import Job, Round, Step


class Recovery(Transitions):
    @property
    def resend_policy(self) -> ResendPolicy:
        return ResendPolicy(self.settings.ready_grace_s, self.settings.resend_max_interval_s)

    def recover(self, max_attempts: int = 3, waiting: Effects | None = None) -> Effects:
        """Effects that re-send lost work; work lost `max_attempts` times fails with that reason.

        `waiting`: the work whose message is in a broker queue right now (never re-sent); None if
        the broker cannot be read.
        """
        waiting = waiting if waiting is not None else Effects()
        eff = Effects()
        t = now()
        with self.sessions.begin() as s:
            eff.solve += self._queued_jobs(s, t, set(waiting.solve))
            eff.merge(self._recover_rounds(s, max_attempts, t, set(waiting.plans) | set(waiting.replans)))
            eff.merge(self._recover_steps(s, max_attempts, t, set(waiting.steps)))
            eff.finalize += self._unfinished_jobs(s, t, set(waiting.finalize))
            eff.score += self._unscored_jobs(s, t, set(waiting.score))
        return eff

    def _cut(self, t: datetime) -> datetime:
        """Nothing sent after this is overdue: the shortest interval is the grace."""
        return t - timedelta(seconds=self.settings.ready_grace_s)

    def _record_sends(self, s: Session, model: Any, ids: Iterable[Any], t: datetime) -> None:
        ids = list(ids)
        if ids:
            s.execute(
                update(model)
                .where(model.id.in_(ids))
                .values(sent_at=t, sends=model.sends + 1)
                .execution_options(synchronize_session=False)
            )

    def _queued_jobs(self, s: Session, t: datetime, waiting: set[str]) -> list[str]:
        # A queued job's solve was sent at its admission (the feeder stamps started_at when it sends
        # solve), not when its row was written: a batch job written long ago and admitted just now
        # has its message in flight.
        cut = self._cut(t)
        policy = self.resend_policy
        rows = s.execute(
            select(Job.id, Job.started_at, Job.created_at, Job.sent_at, Job.sends).where(
                Job.status == JobStatus.QUEUED,
                func.coalesce(Job.started_at, Job.created_at) < cut,
                Job.sent_at.is_(None) | (Job.sent_at < cut),
            )
        ).all()
        due = [
            r.id
            for r in rows
            if r.id not in waiting and policy.due(latest(r.started_at or r.created_at, r.sent_at) or t, r.sends, t)
        ]
        self._record_sends(s, Job, due, t)
        return due

    def _unfinished_jobs(self, s: Session, t: datetime, waiting: set[str]) -> list[str]:
        """Running jobs with no open chain: the task that ended the last one died before closing the
        job. The first sighting sends finalize (it is cheap and idempotent); later ones back off."""
        policy = self.resend_policy
        rows = s.execute(
            select(Job.id, Job.sent_at, Job.sends).where(Job.status == JobStatus.RUNNING, Job.open_chains <= 0)
        ).all()
        due = [r.id for r in rows if r.id not in waiting and (r.sent_at is None or policy.due(r.sent_at, r.sends, t))]
        self._record_sends(s, Job, due, t)
        return due

    def _unscored_jobs(self, s: Session, t: datetime, waiting: set[str]) -> list[str]:
        """Finished jobs with a reference but no verifier reward, and (group judge on) finished groups
        without a reference and without a judgement: their score task was lost."""
        lost = queries.unscored_jobs(s, older_than_s=self.settings.ready_grace_s)
        if self.settings.group_judge:
            lost += queries.unjudged_jobs(s, older_than_s=self.settings.ready_grace_s)
        ids = [i for i in lost if i not in waiting]
        policy = self.resend_policy
        rows = s.execute(select(Job.id, Job.finished_at, Job.sent_at, Job.sends).where(Job.id.in_(ids))).all()
        due = [r.id for r in rows if policy.due(latest(r.finished_at, r.sent_at) or t, r.sends, t)]
        self._record_sends(s, Job, due, t)
        return due

    def _recover_rounds(self, s: Session, max_attempts: int, t: datetime, waiting: set[int]) -> Effects:
        eff = Effects()
        cut = self._cut(t)
        policy = self.resend_policy
        lost: list[Round] = []
        for rnd in s.scalars(
            select(Round).where(
                Round.status == RoundStatus.PLANNING,
                (Round.lease_until < t)
                | (
                    Round.lease_until.is_(None)
                    & (Round.created_at < cut)
                    & (Round.sent_at.is_(None) | (Round.sent_at < cut))
                ),
            )
        ):
            if rnd.id in waiting:
                continue
            if rnd.lease_until is not None:
                if policy.lease_due(rnd.lease_until, rnd.sent_at, rnd.sends, t):
                    lost.append(rnd)
            elif policy.due(latest(rnd.created_at, rnd.sent_at) or t, rnd.sends, t):
                lost.append(rnd)
        for rnd in lost:
            if rnd.attempts >= max_attempts:
                rnd.status, rnd.error, rnd.lease_until = RoundStatus.FAILED, f"lost {rnd.attempts} times", None
                eff.merge(self._end_chain_after_failure(s, rnd.chain_id, rnd.error))
                continue
            rnd.sent_at, rnd.sends = t, rnd.sends + 1
            if rnd.kind == RoundKind.REPLAN:
                eff.replans.append(rnd.id)
            else:
                eff.plans.append(rnd.id)
        return eff

    def _recover_steps(self, s: Session, max_attempts: int, t: datetime, waiting: set[int]) -> Effects:
        eff = Effects()
        cut = self._cut(t)
        policy = self.resend_policy
        rows = s.execute(
            select(Step.id, Step.status, Step.attempts, Step.ready_at, Step.lease_until, Step.sent_at, Step.sends)
            .where(
                ((Step.status == StepStatus.RUNNING) & (Step.lease_until < t))
                | (
                    (Step.status == StepStatus.READY)
                    & (Step.ready_at < cut)
                    & (Step.sent_at.is_(None) | (Step.sent_at < cut))
                )
            )
            .execution_options(synchronize_session=False)
        ).all()
        due: list[int] = []
        for r in rows:
            if r.id in waiting:
                continue
            if r.status == StepStatus.RUNNING:
                lost = policy.lease_due(r.lease_until, r.sent_at, r.sends, t)
            else:
                lost = policy.due(latest(r.ready_at, r.sent_at) or t, r.sends, t)
            if not lost:
                continue
            if r.attempts >= max_attempts:
                eff.merge(self._fail_step(s, r.id, f"worker lost the step {r.attempts} times"))
            else:
                due.append(r.id)
        self._record_sends(s, Step, due, t)
        eff.steps += due
        return eff
