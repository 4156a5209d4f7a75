"""Transitions every part of the state machine shares: open a round, start a workflow, finish a
step, a round or a chain. Guarded `UPDATE ... WHERE status = ...` statements: a duplicate
delivery changes nothing. Each method runs inside the caller's transaction and returns `Effects`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import ARRAY, ColumnElement, CursorResult, Table, any_, bindparam, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from conductor.config.pool import Pool
from conductor.config.settings import Settings
from conductor.domain.calculator import uses_numbers_of
from conductor.domain.effects import Effects
from conductor.domain.errors import BudgetExceeded
from conductor.domain.prompts import expand_question
from conductor.domain.states import ChainStatus, RoundKind, RoundStatus, StepStatus
from conductor.domain.tools import is_tool_miss
from conductor.domain.usage import Usage
from conductor.domain.workflow import Workflow
from conductor.engine import statements as sql
from conductor.store import queries
from conductor.store.models import Chain, Job, Round, Step
from conductor.store.tables import chains, jobs, rounds, steps

#: A step that may still fail: ready, leased, or delegated to a nested workflow.
LIVE_STEP_WORK = (StepStatus.READY, StepStatus.RUNNING, StepStatus.DELEGATED)


def updated(s: Session, statement: Any, params: dict[str, Any] | None = None) -> int:
    """Run a guarded UPDATE and say how many rows it changed (0: another delivery got there first)."""
    result = cast(CursorResult[Any], s.execute(statement, params))
    return int(result.rowcount)


def inserted_ids(s: Session, table: Table, rows: list[dict[str, Any]]) -> list[int]:
    """INSERT `rows` in one statement; their new ids, in the order of `rows`."""
    returning = insert(table).returning(table.c.id, sort_by_parameter_order=True)
    return list(s.execute(returning, rows).scalars().all())


def now() -> datetime:
    return datetime.now(UTC)


def budget_spent(job: Job, max_model_calls: int) -> BudgetExceeded | None:
    """Which of the job's budgets is spent, as the error that stops it; None while all have room."""
    if job.model_calls >= max_model_calls:
        return BudgetExceeded(f"{job.model_calls} model calls (cap {max_model_calls})")
    tokens = job.prompt_tokens + job.completion_tokens
    if job.budget_tokens is not None and tokens >= job.budget_tokens:
        return BudgetExceeded(f"{tokens} tokens (budget {job.budget_tokens})")
    if job.budget_usd is not None and job.cost_usd >= job.budget_usd:
        return BudgetExceeded(f"${job.cost_usd:.6f} (budget ${job.budget_usd})")
    return None


class Transitions:
    """The store, settings and pool, and the transitions jobs, rounds and steps have in common."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings, pool: Pool) -> None:
        self.sessions = sessions
        self.settings = settings
        self.pool = pool
        #: Only a pool with a tool worker can have a tool miss to rescue: others skip the check.
        self._has_tool = any(w.is_tool for w in pool.workers)
        bind = sessions.kw.get("bind")
        #: PostgreSQL runs some transitions as one statement where SQLite needs two (see `_claim_step`).
        self.postgres = bind is not None and bind.dialect.name == "postgresql"

    def _among(self, column: ColumnElement[Any], values: Sequence[Any]) -> ColumnElement[bool]:
        """`column IN values`. On PostgreSQL `= ANY(:array)`, one bound array: SQLAlchemy renders an
        expanding IN list anew on every execution, and that was a tenth of a step's CPU."""
        if self.postgres:
            return column == any_(bindparam(None, list(values), type_=ARRAY(column.type)))
        return column.in_(values)

    # -- opening ---------------------------------------------------------------------------
    def _new_round(self, s: Session, chain: Chain, kind: RoundKind) -> Round:
        chain.rounds_used += 1
        rnd = Round(
            chain_id=chain.id,
            job_id=chain.job_id,
            round_index=chain.rounds_used - 1,
            kind=kind.value,
            status=RoundStatus.PLANNING,
        )
        s.add(rnd)
        s.flush()
        return rnd

    def _start_workflow(self, s: Session, rnd: Round, workflow: Workflow) -> list[int]:
        """Write the round's steps; returns the ids of those with no dependencies (ready now)."""
        rnd.workflow = workflow.to_lists()
        rnd.n_steps = len(workflow.steps)
        rnd.status = RoundStatus.RUNNING
        return self._insert_steps(s, rnd, workflow)

    def _insert_steps(self, s: Session, rnd: Round, workflow: Workflow) -> list[int]:
        return self._insert_step_rows(s, rnd.id, rnd.job_id, workflow)

    def _insert_step_rows(self, s: Session, round_id: int, job_id: str, workflow: Workflow) -> list[int]:
        """Write a round's steps in one INSERT ... RETURNING; returns the ids of those ready now."""
        t = now()
        rows = []
        for st in workflow.steps:
            deps = list(st.dependencies())
            rows.append(
                {
                    "round_id": round_id,
                    "job_id": job_id,
                    "step_index": st.index,
                    "worker_index": st.worker,
                    "worker_name": self.pool.name_of(st.worker),
                    "subtask": st.subtask,
                    "access": st.access if st.access == "all" else list(st.access),
                    "dependencies": deps,
                    "pending_deps": len(deps),
                    "status": StepStatus.READY if not deps else StepStatus.PENDING,
                    "ready_at": t if not deps else None,
                }
            )
        ids = inserted_ids(s, steps, rows)
        return [sid for sid, row in zip(ids, rows, strict=True) if not row["dependencies"]]

    # -- steps -----------------------------------------------------------------------------
    def _complete_step(self, s: Session, step_id: int, output: str, model: str | None, usage: Usage) -> Effects:
        params = {
            "p_step": step_id,
            "p_output": output,
            "p_model": model,
            "p_prompt_tokens": usage.prompt_tokens,
            "p_completion_tokens": usage.completion_tokens,
            "p_cost_usd": usage.cost_usd,
            "p_latency_s": usage.latency_s,
            "p_t": now(),
        }
        if self.postgres:  # the step recorded and counted on its round in one statement
            row = s.execute(sql.complete_and_count(), params).first()
            if row is None:
                return Effects()  # already recorded by an earlier delivery
            round_id, index, job_id, done, total, workflow = row
            counted = None if done is None else (done, total, workflow)
        else:
            recorded = s.execute(sql.COMPLETE_STEP, params).first()
            if recorded is None:
                return Effects()
            round_id, index, job_id = recorded
            counted = s.execute(sql.COUNT_ON_ROUND, {"p_round": round_id}).first()
        # Nothing counted: the round already failed, and its other steps were skipped.
        eff = Effects() if counted is None else self._after_count(s, round_id, index, output, *counted)
        # The job row last, in the order `_fail_step` locks rows too (the step, its round, the
        # round's other steps, the chain, the job): a completion and a failure never deadlock.
        self._add_usage(s, job_id, usage)
        return eff

    def _after_count(
        self, s: Session, round_id: int, index: int, output: str, done: int, total: int, workflow: Any
    ) -> Effects:
        """A step counted on its running round: release its successors, and finish the round with
        its last step's output once every step is done."""
        eff = Effects(steps=self._release_successors(s, round_id, workflow, index))
        if done == total:
            last = output if index == total - 1 else None
            if last is None:
                last = s.scalar(
                    select(steps.c.output).where(steps.c.round_id == round_id, steps.c.step_index == total - 1)
                )
            eff.merge(self._finish_round(s, round_id, last or ""))
        return eff

    def _release_successors(self, s: Session, round_id: int, workflow: dict[str, Any] | None, index: int) -> list[int]:
        """Count one finished dependency off each successor; returns those now ready.

        One guarded UPDATE: the row lock serialises parents finishing at the same moment, and
        each sees the count the other left, so exactly one of them readies the join.
        """
        successors = Workflow.from_lists(**(workflow or {})).successors(index)
        if not successors:
            return []
        released = s.execute(
            sql.release_successors(self.postgres),
            {"p_round": round_id, "p_successors": list(successors), "p_t": now()},
        ).all()
        return [sid for sid, pending, status in released if pending == 0 and status == StepStatus.READY]

    def _fail_step(self, s: Session, step_id: int, error: str) -> Effects:
        row = s.execute(
            update(steps)
            .where(steps.c.id == step_id, steps.c.status.in_(LIVE_STEP_WORK))
            .values(status=StepStatus.FAILED, error=error, finished_at=now(), lease_until=None)
            .returning(steps.c.round_id)
        ).first()
        if row is None:
            return Effects()
        round_id = row[0]
        ended = s.execute(
            update(rounds)
            .where(rounds.c.id == round_id, rounds.c.status == RoundStatus.RUNNING)
            .values(status=RoundStatus.FAILED, error=f"step failed: {error}", finished_at=now())
            .returning(rounds.c.chain_id)
        ).first()
        if ended is None:
            return Effects()
        s.execute(
            update(steps)
            .where(steps.c.round_id == round_id, steps.c.status.in_([StepStatus.PENDING, StepStatus.READY]))
            .values(status=StepStatus.SKIPPED)
        )
        return self._end_chain_after_failure(s, ended[0], error)

    # -- rounds and chains -----------------------------------------------------------------
    def _finish_round(self, s: Session, round_id: int, answer: str) -> Effects:
        kind, chain_id = s.execute(
            update(rounds)
            .where(rounds.c.id == round_id)
            .values(status=RoundStatus.DONE, answer=answer, finished_at=now())
            .returning(rounds.c.kind, rounds.c.chain_id)
        ).one()
        if kind == RoundKind.PLAN and self._has_tool and self.settings.tool_miss_fallback:
            chain = self._tool_missed(s, round_id, chain_id, answer)
            if chain is not None:
                rescue = self._start_fallback(s, chain)
                if rescue is not None:
                    return rescue
        # A fixed or fallback round never replans: decided without loading the chain or the job.
        replans = self.pool.conductor.replans if self.settings.replans is None else self.settings.replans
        if self.settings.recursion and replans and kind in (RoundKind.PLAN, RoundKind.REPLAN):
            chain = s.get_one(Chain, chain_id)
            if chain.rounds_used < self.settings.max_rounds and chain.job.options.get("recursion", True):
                return Effects(replans=[self._new_round(s, chain, RoundKind.REPLAN).id])
        return self._finish_chain(s, chain_id, ChainStatus.DONE, answer=answer)

    def _tool_missed(self, s: Session, round_id: int, chain_id: int, answer: str) -> Chain | None:
        """The plan's chain when its answer is a tool with nothing to compute, or the calculator evaluating
        an expression the Conductor wrote (the step saw no earlier step) with no number from the question."""
        if is_tool_miss(answer):
            return s.get_one(Chain, chain_id)
        last = s.scalars(
            select(Step).where(Step.round_id == round_id).order_by(Step.step_index.desc()).limit(1)
        ).first()
        if last is None or (last.step_index > 0 and last.access):  # it may have computed what a model wrote
            return None
        spec = next((w for w in self.pool.workers if w.name == last.worker_name), None)
        # Only the calculator's input must hold the question's numbers: a program counts letters or sorts
        # words of the question without writing one of them, and an MCP tool's arguments are no expression.
        if spec is None or spec.model != "tool/calculator":
            return None
        chain = s.get_one(Chain, chain_id)
        return None if uses_numbers_of(expand_question(last.subtask, chain.question), chain.question) else chain

    def _start_fallback(self, s: Session, chain: Chain) -> Effects | None:
        """The pool's fallback worker answers the chain's question alone (None: the pool has none)."""
        name = self.settings.fallback_worker or self.pool.fallback_worker
        if not name:
            return None
        index = [w.name for w in self.pool.workers].index(self.pool.worker(name).name)
        fallback = self._new_round(s, chain, RoundKind.FALLBACK)
        return Effects(steps=self._start_workflow(s, fallback, Workflow.from_lists([index], [chain.question], [[]])))

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
        ended = s.execute(
            update(chains)
            .where(chains.c.id == chain_id, chains.c.status == ChainStatus.RUNNING)
            .values(status=status, answer=answer, error=error, finished_at=now())
            .returning(chains.c.parent_step_id, chains.c.job_id)
        ).first()
        if ended is None:
            return Effects()
        parent_step_id, job_id = ended
        if parent_step_id is not None:
            if status == ChainStatus.DONE:
                return self._complete_step(s, parent_step_id, answer or "", "conductor", Usage())
            return self._fail_step(s, parent_step_id, f"nested workflow failed: {error}")
        left = s.execute(
            update(jobs)
            .where(jobs.c.id == job_id)
            .values(open_chains=jobs.c.open_chains - 1)
            .returning(jobs.c.open_chains)
        ).scalar_one()
        return Effects(finalize=[job_id]) if left == 0 else Effects()

    # -- jobs ------------------------------------------------------------------------------
    def _reserve(self, s: Session, job_id: str) -> BudgetExceeded | None:
        """`reserve_call` inside the caller's transaction: None if admitted, else why not."""
        admitted = updated(s, sql.RESERVE_CALL, {"p_job": job_id, "p_max_calls": self.settings.max_model_calls})
        return None if admitted else self._why_not_reserved(s, job_id)

    def _why_not_reserved(self, s: Session, job_id: str) -> BudgetExceeded:
        """The budget that kept a call from being counted on the job."""
        spent = budget_spent(s.get_one(Job, job_id), self.settings.max_model_calls)
        return spent or BudgetExceeded("a budget ran out while this call was admitted")

    def _max_steps(self, job: Job) -> int:
        return self._max_steps_of(job.options)

    def _max_steps_of(self, options: dict[str, Any] | None) -> int:
        cap = self.pool.step_cap(self.settings.max_steps)
        return min(int((options or {}).get("max_steps", cap)), cap)

    def _add_usage(self, s: Session, job_id: str, usage: Usage) -> None:
        if usage:
            s.execute(
                sql.ADD_USAGE,
                {
                    "p_job": job_id,
                    "p_prompt_tokens": usage.prompt_tokens,
                    "p_completion_tokens": usage.completion_tokens,
                    "p_cost_usd": usage.cost_usd,
                    "p_cache_hits": usage.cache_hits,
                    "p_cached_tokens": usage.cached_tokens,
                    "p_saved_usd": usage.saved_usd,
                },
            )
