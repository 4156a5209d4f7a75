"""Steps: lease one, run a Conductor-as-worker step as a nested chain, record its output or failure,
hand it back when a rate limit asks for later."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from conductor.domain.effects import Effects, StepTask
from conductor.domain.states import RoundKind, RoundStatus, StepStatus
from conductor.domain.usage import Usage
from conductor.engine.transitions import NESTED, Transitions, now, updated
from conductor.store import queries
from conductor.store.models import Chain, Job, Step

PREVIOUS_ANSWER = "Previous round's final answer (to check or improve)"


class StepRules(Transitions):
    def claim_step(self, step_id: int, host: str = "") -> StepTask | None:
        """Lease a ready step (or one whose lease ran out) for the Celery host `host`."""
        with self.sessions.begin() as s:
            t = now()
            claimed = updated(
                s,
                update(Step)
                .where(
                    Step.id == step_id,
                    (Step.status == StepStatus.READY.value)
                    | ((Step.status == StepStatus.RUNNING.value) & (Step.lease_until < t)),
                )
                .values(
                    status=StepStatus.RUNNING.value,
                    attempts=Step.attempts + 1,
                    claimed_by=host,
                    started_at=t,
                    lease_until=t + timedelta(seconds=self.settings.step_lease_s),
                ),
            )
            if not claimed:
                return None
            step = s.get_one(Step, step_id)
            rnd = step.round
            if rnd.status != RoundStatus.RUNNING.value:
                step.status = StepStatus.SKIPPED.value
                return None
            outputs = {d.step_index: d for d in rnd.steps}
            context = [(outputs[i].subtask, outputs[i].output or "") for i in step.dependencies]
            if step.access == "all" and rnd.kind == RoundKind.REPLAN.value:
                previous = queries.latest_answer_round(s, rnd.chain_id, before=rnd.round_index)
                if previous is not None:
                    context.insert(0, (PREVIOUS_ANSWER, previous.answer or ""))
            return StepTask(
                step_id=step.id,
                job_id=step.job_id,
                worker_index=step.worker_index,
                worker_name=step.worker_name,
                subtask=step.subtask,
                context=context,
                depth=rnd.chain.depth,
            )

    def start_nested(self, task: StepTask) -> Effects:
        """Run a Conductor-as-worker step as a nested chain; its answer completes the step."""
        with self.sessions.begin() as s:
            # No lease while the child chain works: the child's own rounds and steps are leased.
            s.execute(update(Step).where(Step.id == task.step_id).values(lease_until=None, claimed_by=NESTED))
            existing = s.scalar(select(Chain).where(Chain.parent_step_id == task.step_id))
            if existing is not None:
                return Effects()
            chain = Chain(
                job_id=task.job_id,
                sample_index=0,
                parent_step_id=task.step_id,
                depth=task.depth + 1,
                question=task.nested_question,
            )
            s.add(chain)
            s.flush()
            return Effects(plans=[self._new_round(s, chain, RoundKind.PLAN).id])

    def complete_step(self, step_id: int, output: str, *, model: str | None = None, usage: Usage = Usage()) -> Effects:
        with self.sessions.begin() as s:
            return self._complete_step(s, step_id, output, model, usage)

    def fail_step(self, step_id: int, error: str) -> Effects:
        with self.sessions.begin() as s:
            return self._fail_step(s, step_id, error)

    def release_step(self, step_id: int) -> None:
        """Hand a claimed step back (a rate limit asked us to come back later).

        The claim's attempt and the model call it reserved are given back: waiting for a
        limit is not a lost step and spends none of the job's call budget.
        """
        with self.sessions.begin() as s:
            row = s.execute(
                update(Step)
                .where(Step.id == step_id, Step.status == StepStatus.RUNNING.value)
                .values(status=StepStatus.READY.value, lease_until=None, ready_at=now(), attempts=Step.attempts - 1)
                .returning(Step.job_id)
            ).first()
            if row is not None:
                s.execute(update(Job).where(Job.id == row[0]).values(model_calls=Job.model_calls - 1))
