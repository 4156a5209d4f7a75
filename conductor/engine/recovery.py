"""Recovery: find work whose task was lost (a killed Celery host, a lost message) and say what to re-send."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from conductor.domain.effects import Effects
from conductor.domain.states import JobStatus, RoundKind, RoundStatus, StepStatus
from conductor.engine.transitions import Transitions, now
from conductor.store.models import Job, Round, Step


class Recovery(Transitions):
    def recover(self, max_attempts: int = 3) -> Effects:
        """Effects that re-send lost work; work lost `max_attempts` times fails with that reason."""
        eff = Effects()
        t = now()
        grace = t - timedelta(seconds=self.settings.ready_grace_s)
        with self.sessions.begin() as s:
            # A queued job's solve is lost once it has waited past the grace period since its
            # admission (the feeder stamps started_at when it sends solve), not since its row was
            # written: a batch job written long ago and admitted just now has its message in flight.
            queued_since = func.coalesce(Job.started_at, Job.created_at)
            eff.solve += list(s.scalars(select(Job.id).where(Job.status == JobStatus.QUEUED, queued_since < grace)))
            eff.merge(self._recover_rounds(s, max_attempts, grace))
            for step in s.scalars(
                select(Step).where(
                    ((Step.status == StepStatus.RUNNING) & (Step.lease_until < t))
                    | ((Step.status == StepStatus.READY) & (Step.ready_at < grace))
                )
            ):
                if step.attempts >= max_attempts:
                    eff.merge(self._fail_step(s, step.id, f"worker lost the step {step.attempts} times"))
                else:
                    eff.steps.append(step.id)
            eff.finalize += list(s.scalars(select(Job.id).where(Job.status == JobStatus.RUNNING, Job.open_chains <= 0)))
        return eff

    def _recover_rounds(self, s: Session, max_attempts: int, grace: datetime) -> Effects:
        eff = Effects()
        t = now()
        for rnd in s.scalars(
            select(Round).where(
                Round.status == RoundStatus.PLANNING,
                (Round.lease_until < t) | (Round.lease_until.is_(None) & (Round.created_at < grace)),
            )
        ):
            if rnd.attempts >= max_attempts:
                rnd.status, rnd.error, rnd.lease_until = RoundStatus.FAILED, f"lost {rnd.attempts} times", None
                eff.merge(self._end_chain_after_failure(s, rnd.chain_id, rnd.error))
            elif rnd.kind == RoundKind.REPLAN:
                eff.replans.append(rnd.id)
            else:
                eff.plans.append(rnd.id)
        return eff
