"""Transitions every part of the state machine shares: open a round, start a workflow, finish a
step, a round or a chain. Guarded `UPDATE ... WHERE status = ...` statements: a duplicate
delivery changes nothing. Each method runs inside the caller's transaction and returns `Effects`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session, sessionmaker

from conductor.config.pool import Pool
from conductor.config.settings import Settings
from conductor.domain.effects import Effects
from conductor.domain.states import ChainStatus, RoundKind, RoundStatus, StepStatus
from conductor.domain.usage import Usage
from conductor.domain.workflow import Workflow
from conductor.store import queries
from conductor.store.models import Chain, Job, Round, Step

NESTED = "nested"  #: `claimed_by` of a step whose work is a nested Conductor chain


def updated(s: Session, statement: Any) -> int:
    """Run a guarded UPDATE and say how many rows it changed (0: another delivery got there first)."""
    result = cast(CursorResult[Any], s.execute(statement))
    return int(result.rowcount)


def now() -> datetime:
    return datetime.now(UTC)


class Transitions:
    """The store, settings and pool, and the transitions jobs, rounds and steps have in common."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings, pool: Pool) -> None:
        self.sessions = sessions
        self.settings = settings
        self.pool = pool

    # -- opening ---------------------------------------------------------------------------
    def _new_round(self, s: Session, chain: Chain, kind: RoundKind) -> Round:
        chain.rounds_used += 1
        rnd = Round(
            chain_id=chain.id,
            job_id=chain.job_id,
            round_index=chain.rounds_used - 1,
            kind=kind.value,
            status=RoundStatus.PLANNING.value,
        )
        s.add(rnd)
        s.flush()
        return rnd

    def _start_workflow(self, s: Session, rnd: Round, workflow: Workflow) -> list[int]:
        """Write the round's steps; returns the ids of those with no dependencies (ready now)."""
        rnd.workflow = workflow.to_lists()
        rnd.n_steps = len(workflow.steps)
        rnd.status = RoundStatus.RUNNING.value
        ready: list[int] = []
        t = now()
        for st in workflow.steps:
            deps = list(st.dependencies())
            row = Step(
                round_id=rnd.id,
                job_id=rnd.job_id,
                step_index=st.index,
                worker_index=st.worker,
                worker_name=self.pool.name_of(st.worker),
                subtask=st.subtask,
                access=st.access if st.access == "all" else list(st.access),
                dependencies=deps,
                pending_deps=len(deps),
                status=StepStatus.READY.value if not deps else StepStatus.PENDING.value,
                ready_at=t if not deps else None,
            )
            s.add(row)
            s.flush()
            if not deps:
                ready.append(row.id)
        return ready

    # -- steps -----------------------------------------------------------------------------
    def _complete_step(self, s: Session, step_id: int, output: str, model: str | None, usage: Usage) -> Effects:
        row = s.execute(
            update(Step)
            .where(Step.id == step_id, Step.status == StepStatus.RUNNING.value)
            .values(
                status=StepStatus.DONE.value,
                output=output,
                model=model,
                prompt_tokens=usage.prompt_tokens,
                completion_tokens=usage.completion_tokens,
                cost_usd=usage.cost_usd,
                latency_s=usage.latency_s,
                finished_at=now(),
                lease_until=None,
            )
            .returning(Step.round_id, Step.step_index, Step.job_id)
        ).first()
        if row is None:
            return Effects()  # already recorded by an earlier delivery
        round_id, index, job_id = row
        self._add_usage(s, job_id, usage)
        rnd = s.get_one(Round, round_id)
        if rnd.status != RoundStatus.RUNNING.value:
            return Effects()
        eff = Effects(steps=self._release_successors(s, rnd, index))
        done, total = s.execute(
            update(Round)
            .where(Round.id == round_id)
            .values(steps_done=Round.steps_done + 1)
            .returning(Round.steps_done, Round.n_steps)
        ).one()
        if done == total:
            last = s.scalar(select(Step.output).where(Step.round_id == round_id, Step.step_index == total - 1))
            eff.merge(self._finish_round(s, rnd, last or ""))
        return eff

    def _release_successors(self, s: Session, rnd: Round, index: int) -> list[int]:
        """Count one finished dependency off each successor; returns those now ready."""
        successors = Workflow.from_lists(**(rnd.workflow or {})).successors(index)
        if not successors:
            return []
        released = s.execute(
            update(Step)
            .where(Step.round_id == rnd.id, Step.step_index.in_(successors))
            .values(pending_deps=Step.pending_deps - 1)
            .returning(Step.id, Step.pending_deps)
        ).all()
        now_ready = [sid for sid, pending in released if pending == 0]
        if now_ready:
            s.execute(
                update(Step)
                .where(Step.id.in_(now_ready), Step.status == StepStatus.PENDING.value)
                .values(status=StepStatus.READY.value, ready_at=now())
            )
        return now_ready

    def _fail_step(self, s: Session, step_id: int, error: str) -> Effects:
        row = s.execute(
            update(Step)
            .where(Step.id == step_id, Step.status.in_([StepStatus.RUNNING.value, StepStatus.READY.value]))
            .values(status=StepStatus.FAILED.value, error=error, finished_at=now(), lease_until=None)
            .returning(Step.round_id)
        ).first()
        if row is None:
            return Effects()
        round_id = row[0]
        ended = updated(
            s,
            update(Round)
            .where(Round.id == round_id, Round.status == RoundStatus.RUNNING.value)
            .values(status=RoundStatus.FAILED.value, error=f"step failed: {error}", finished_at=now()),
        )
        if not ended:
            return Effects()
        s.execute(
            update(Step)
            .where(Step.round_id == round_id, Step.status.in_([StepStatus.PENDING.value, StepStatus.READY.value]))
            .values(status=StepStatus.SKIPPED.value)
        )
        return self._end_chain_after_failure(s, s.get_one(Round, round_id).chain_id, error)

    # -- rounds and chains -----------------------------------------------------------------
    def _finish_round(self, s: Session, rnd: Round, answer: str) -> Effects:
        rnd.status, rnd.answer, rnd.finished_at = RoundStatus.DONE.value, answer, now()
        chain = rnd.chain
        may_replan = (
            self.settings.recursion
            and chain.job.options.get("recursion", True)
            and rnd.kind in (RoundKind.PLAN.value, RoundKind.REPLAN.value)
            and chain.rounds_used < self.settings.max_rounds
        )
        if may_replan:
            return Effects(replans=[self._new_round(s, chain, RoundKind.REPLAN).id])
        return self._finish_chain(s, chain.id, ChainStatus.DONE, answer=answer)

    def _keep_previous_answer(self, s: Session, rnd: Round) -> Effects:
        """End the chain with the answer an earlier round already gave (a replan accepted or garbled)."""
        previous = queries.latest_answer_round(s, rnd.chain_id, before=rnd.round_index)
        return self._finish_chain(s, rnd.chain_id, ChainStatus.DONE, answer=previous.answer if previous else None)

    def _end_chain_after_failure(self, s: Session, chain_id: int, error: str) -> Effects:
        previous = queries.latest_answer_round(s, chain_id)
        if previous is not None:
            # A failed improvement attempt keeps the answer the chain already had.
            return self._finish_chain(s, chain_id, ChainStatus.DONE, answer=previous.answer)
        return self._finish_chain(s, chain_id, ChainStatus.FAILED, error=error)

    def _finish_chain(
        self, s: Session, chain_id: int, status: ChainStatus, *, answer: str | None = None, error: str | None = None
    ) -> Effects:
        if status == ChainStatus.DONE and answer is None:
            status, error = ChainStatus.FAILED, error or "chain ended without an answer"
        ended = updated(
            s,
            update(Chain)
            .where(Chain.id == chain_id, Chain.status == ChainStatus.RUNNING.value)
            .values(status=status.value, answer=answer, error=error, finished_at=now()),
        )
        if not ended:
            return Effects()
        chain = s.get_one(Chain, chain_id)
        if chain.parent_step_id is not None:
            if status == ChainStatus.DONE:
                return self._complete_step(s, chain.parent_step_id, answer or "", "conductor", Usage())
            return self._fail_step(s, chain.parent_step_id, f"nested workflow failed: {error}")
        left = s.execute(
            update(Job).where(Job.id == chain.job_id).values(open_chains=Job.open_chains - 1).returning(Job.open_chains)
        ).scalar_one()
        return Effects(finalize=[chain.job_id]) if left == 0 else Effects()

    # -- jobs ------------------------------------------------------------------------------
    def _max_steps(self, job: Job) -> int:
        return min(int(job.options.get("max_steps", self.settings.max_steps)), self.settings.max_steps)

    def _add_usage(self, s: Session, job_id: str, usage: Usage) -> None:
        if usage:
            s.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(
                    prompt_tokens=Job.prompt_tokens + usage.prompt_tokens,
                    completion_tokens=Job.completion_tokens + usage.completion_tokens,
                    cost_usd=Job.cost_usd + usage.cost_usd,
                )
            )
