"""The workflow state machine over the SQL store: what happens when a plan, a step or a chain ends.

Every public method is one transaction and returns `Effects`: the tasks that became runnable.
The caller (the Celery layer) enqueues them after the commit, so a crash between the two is
repaired by `recover()` from the database, and no task ever waits on another. Transitions are
guarded `UPDATE ... WHERE status = ...` statements: a duplicate delivery changes nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session, sessionmaker

from conductor.config.pool import Pool
from conductor.config.settings import Settings
from conductor.domain.effects import Effects, RoundTask, StepTask
from conductor.domain.errors import PlanParseError
from conductor.domain.parser import parse_workflow
from conductor.domain.problem import Problem
from conductor.domain.states import ChainStatus, JobStatus, ParseStatus, RoundKind, RoundStatus, StepStatus
from conductor.domain.workflow import Workflow
from conductor.store.models import Chain, Job, Round, Step

BUDGET_MARK = "budget exhausted"


def _updated(s: Session, statement: Any) -> int:
    """Run a guarded UPDATE and say how many rows it changed (0: another delivery got there first)."""
    result = cast(CursorResult[Any], s.execute(statement))
    return int(result.rowcount)


def now() -> datetime:
    return datetime.now(UTC)


class Engine:
    def __init__(self, sessions: sessionmaker[Session], settings: Settings, pool: Pool) -> None:
        self.sessions = sessions
        self.settings = settings
        self.pool = pool

    # -- jobs -----------------------------------------------------------------------------
    def start_job(self, job_id: str) -> Effects:
        eff = Effects()
        with self.sessions.begin() as s:
            started = _updated(
                s,
                update(Job)
                .where(Job.id == job_id, Job.status == JobStatus.QUEUED.value)
                .values(status=JobStatus.RUNNING.value, started_at=now()),
            )
            if not started:
                return eff
            job = s.get_one(Job, job_id)
            question = Problem.model_validate(job.problem).question
            job.open_chains = job.samples
            fixed = job.options.get("workflow")
            for sample in range(job.samples):
                chain = Chain(job_id=job_id, sample_index=sample, depth=0, question=question)
                s.add(chain)
                s.flush()
                if fixed:
                    rnd = s.get_one(Round, self._new_round(s, chain, RoundKind.FIXED))
                    eff.steps += self._start_workflow(s, rnd, Workflow.from_lists(**fixed))
                else:
                    eff.plans.append(self._new_round(s, chain, RoundKind.PLAN))
        return eff

    def finalize(self, job_id: str) -> bool:
        """Close a job whose chains all ended. Returns True if this call closed it.

        The answer is the first successful sample's; with a verifier, scoring later moves it
        to the best-scoring sample (reward_pipeline.rewards).
        """
        with self.sessions.begin() as s:
            job = s.get_one(Job, job_id)
            if job.status != JobStatus.RUNNING.value or job.open_chains > 0:
                return False
            chains = [c for c in job.chains if c.parent_step_id is None]
            chains.sort(key=lambda c: c.sample_index)
            done = [c for c in chains if c.status == ChainStatus.DONE.value]
            if done:
                best = done[0]
                status, answer, error, chain_id = JobStatus.DONE, best.answer, None, best.id
            else:
                errors = [c.error or "unknown error" for c in chains]
                budget = all(BUDGET_MARK in e for e in errors)
                status = JobStatus.BUDGET_EXCEEDED if budget else JobStatus.FAILED
                answer, chain_id = None, None
                error = "; ".join(f"sample {c.sample_index}: {e}" for c, e in zip(chains, errors, strict=True))
            closed = _updated(
                s,
                update(Job)
                .where(Job.id == job_id, Job.status == JobStatus.RUNNING.value)
                .values(status=status.value, answer=answer, error=error, answer_chain_id=chain_id, finished_at=now()),
            )
            return bool(closed)

    # -- Conductor rounds -------------------------------------------------------------------
    def claim_round(self, round_id: int, worker: str = "") -> RoundTask | None:
        """Lease a planning round; None if another worker holds it or it already ended."""
        with self.sessions.begin() as s:
            t = now()
            claimed = _updated(
                s,
                update(Round)
                .where(
                    Round.id == round_id,
                    Round.status == RoundStatus.PLANNING.value,
                    (Round.lease_until.is_(None)) | (Round.lease_until < t),
                )
                .values(attempts=Round.attempts + 1, lease_until=t + timedelta(seconds=self.settings.step_lease_s)),
            )
            if not claimed:
                return None
            rnd = s.get_one(Round, round_id)
            previous = self._latest_answer_round(s, rnd.chain_id, before=rnd.round_index)
            return RoundTask(
                round_id=rnd.id,
                job_id=rnd.job_id,
                kind=RoundKind(rnd.kind),
                max_steps=self._max_steps(rnd.chain.job),
                question=rnd.chain.question,
                previous=Workflow.from_lists(**(previous.workflow or {}))
                if previous and rnd.kind == RoundKind.REPLAN.value
                else None,
                previous_answer=previous.answer if previous and rnd.kind == RoundKind.REPLAN.value else None,
            )

    def reserve_call(self, job_id: str) -> str | None:
        """Count one model call against the job's budgets; returns why not when one is spent.

        Budgets are checked before each call: a call's own size is unknown until it returns,
        so the last admitted call can overshoot a token or USD budget by at most its own cost.
        """
        with self.sessions.begin() as s:
            admitted = _updated(
                s,
                update(Job)
                .where(
                    Job.id == job_id,
                    Job.model_calls < self.settings.max_model_calls,
                    Job.budget_tokens.is_(None) | ((Job.prompt_tokens + Job.completion_tokens) < Job.budget_tokens),
                    Job.budget_usd.is_(None) | (Job.cost_usd < Job.budget_usd),
                )
                .values(model_calls=Job.model_calls + 1),
            )
            if admitted:
                return None
            job = s.get_one(Job, job_id)
            if job.model_calls >= self.settings.max_model_calls:
                return f"{BUDGET_MARK}: {job.model_calls} model calls (cap {self.settings.max_model_calls})"
            if job.budget_tokens is not None and job.prompt_tokens + job.completion_tokens >= job.budget_tokens:
                return f"{BUDGET_MARK}: {job.prompt_tokens + job.completion_tokens} tokens (budget {job.budget_tokens})"
            return f"{BUDGET_MARK}: ${job.cost_usd:.6f} (budget ${job.budget_usd})"

    def record_plan(
        self,
        round_id: int,
        *,
        messages: list[dict],
        text: str,
        token_ids: list[int] | None,
        logprobs: list[float] | None,
        prompt_token_ids: list[int] | None = None,
        model: str,
        policy_version: str | None = None,
        sampling: dict | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cost_usd: float = 0.0,
        latency_s: float | None = None,
    ) -> Effects:
        eff = Effects()
        with self.sessions.begin() as s:
            rnd = s.get_one(Round, round_id)
            if rnd.status != RoundStatus.PLANNING.value:
                return eff  # a duplicate delivery: the first one recorded this round
            is_replan = rnd.kind == RoundKind.REPLAN.value
            max_steps = self._max_steps(rnd.chain.job)
            rnd.prompt_messages = messages
            rnd.prompt_token_ids = prompt_token_ids
            rnd.completion_text = text
            rnd.completion_token_ids = token_ids
            rnd.completion_logprobs = logprobs
            rnd.conductor_model = model
            # The policy that sampled this completion: the caller's, since the pool's Conductor
            # may have been switched to a new checkpoint while the call was in flight.
            conductor = self.pool.conductor
            rnd.policy_version = policy_version or conductor.policy_version
            rnd.sampling = sampling or {"temperature": conductor.temperature, "max_tokens": conductor.max_tokens}
            rnd.prompt_tokens, rnd.completion_tokens, rnd.cost_usd = prompt_tokens, completion_tokens, cost_usd
            rnd.latency_s = latency_s
            rnd.lease_until = None
            self._add_usage(s, rnd.job_id, prompt_tokens, completion_tokens, cost_usd)
            try:
                workflow = parse_workflow(
                    text, pool_size=len(self.pool.cards()), max_steps=max_steps, allow_empty=is_replan
                )
            except PlanParseError as exc:
                rnd.parse_status, rnd.parse_error = ParseStatus.FAILED.value, str(exc)
                rnd.status, rnd.finished_at = RoundStatus.UNPARSEABLE.value, now()
                return eff.merge(self._after_unparseable(s, rnd))
            if workflow.is_empty:
                rnd.parse_status, rnd.status, rnd.finished_at = (
                    ParseStatus.ACCEPT.value,
                    RoundStatus.ACCEPTED.value,
                    now(),
                )
                previous = self._latest_answer_round(s, rnd.chain_id, before=rnd.round_index)
                return eff.merge(
                    self._finish_chain(s, rnd.chain_id, ChainStatus.DONE, answer=previous.answer if previous else None)
                )
            rnd.parse_status = ParseStatus.OK.value
            eff.steps += self._start_workflow(s, rnd, workflow)
        return eff

    def fail_round(self, round_id: int, error: str) -> Effects:
        """The Conductor call itself failed (after retries) or the budget ran out."""
        with self.sessions.begin() as s:
            ended = _updated(
                s,
                update(Round)
                .where(Round.id == round_id, Round.status == RoundStatus.PLANNING.value)
                .values(status=RoundStatus.FAILED.value, error=error, finished_at=now(), lease_until=None),
            )
            if not ended:
                return Effects()
            return self._end_chain_after_failure(s, s.get_one(Round, round_id).chain_id, error)

    # -- steps ---------------------------------------------------------------------------
    def claim_step(self, step_id: int, worker: str = "") -> StepTask | None:
        with self.sessions.begin() as s:
            t = now()
            claimed = _updated(
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
                    claimed_by=worker,
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
                previous = self._latest_answer_round(s, rnd.chain_id, before=rnd.round_index)
                if previous is not None:
                    context.insert(0, ("Previous round's final answer (to check or improve)", previous.answer or ""))
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
        eff = Effects()
        with self.sessions.begin() as s:
            # No lease while the child chain works: the child's own rounds and steps are leased.
            s.execute(update(Step).where(Step.id == task.step_id).values(lease_until=None, claimed_by="nested"))
            existing = s.scalar(select(Chain).where(Chain.parent_step_id == task.step_id))
            if existing is not None:
                return eff
            chain = Chain(
                job_id=task.job_id,
                sample_index=0,
                parent_step_id=task.step_id,
                depth=task.depth + 1,
                question=task.nested_question,
            )
            s.add(chain)
            s.flush()
            eff.plans.append(self._new_round(s, chain, RoundKind.PLAN))
        return eff

    def complete_step(
        self,
        step_id: int,
        output: str,
        *,
        model: str | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cost_usd: float = 0.0,
        latency_s: float | None = None,
    ) -> Effects:
        with self.sessions.begin() as s:
            return self._complete_step(s, step_id, output, model, prompt_tokens, completion_tokens, cost_usd, latency_s)

    def fail_step(self, step_id: int, error: str) -> Effects:
        with self.sessions.begin() as s:
            return self._fail_step(s, step_id, error)

    def release_round(self, round_id: int) -> None:
        """Hand a leased planning round back (its Conductor call hit a limit); refund the call."""
        with self.sessions.begin() as s:
            row = s.execute(
                update(Round)
                .where(Round.id == round_id, Round.status == RoundStatus.PLANNING.value)
                .values(lease_until=None, attempts=Round.attempts - 1)
                .returning(Round.job_id)
            ).first()
            if row is not None:
                s.execute(update(Job).where(Job.id == row[0]).values(model_calls=Job.model_calls - 1))

    def release_step(self, step_id: int) -> None:
        """Hand a claimed step back (a rate limit asked us to come back later).

        The claim's attempt and the model call it reserved are given back: waiting for a
        limit is not a lost step and spends none of the job's call budget.
        """
        with self.sessions.begin() as s:
            row = s.execute(
                update(Step)
                .where(Step.id == step_id, Step.status == StepStatus.RUNNING.value)
                .values(
                    status=StepStatus.READY.value,
                    lease_until=None,
                    ready_at=now(),
                    attempts=Step.attempts - 1,
                )
                .returning(Step.job_id)
            ).first()
            if row is not None:
                s.execute(update(Job).where(Job.id == row[0]).values(model_calls=Job.model_calls - 1))

    # -- recovery ------------------------------------------------------------------------
    def recover(self, max_attempts: int = 3) -> Effects:
        """Find work whose task was lost (killed worker, lost message) and say what to re-enqueue."""
        eff = Effects()
        t = now()
        grace = t - timedelta(seconds=self.settings.ready_grace_s)
        with self.sessions.begin() as s:
            eff.solve += list(
                s.scalars(select(Job.id).where(Job.status == JobStatus.QUEUED.value, Job.created_at < grace))
            )
            for rnd in s.scalars(
                select(Round).where(
                    Round.status == RoundStatus.PLANNING.value,
                    (Round.lease_until < t) | (Round.lease_until.is_(None) & (Round.created_at < grace)),
                )
            ):
                if rnd.attempts >= max_attempts:
                    rnd.status, rnd.error, rnd.lease_until = (
                        RoundStatus.FAILED.value,
                        f"lost {rnd.attempts} times",
                        None,
                    )
                    eff.merge(self._end_chain_after_failure(s, rnd.chain_id, rnd.error))
                elif rnd.kind == RoundKind.REPLAN.value:
                    eff.replans.append(rnd.id)
                else:
                    eff.plans.append(rnd.id)
            for step in s.scalars(
                select(Step).where(
                    ((Step.status == StepStatus.RUNNING.value) & (Step.lease_until < t))
                    | ((Step.status == StepStatus.READY.value) & (Step.ready_at < grace))
                )
            ):
                if step.attempts >= max_attempts:
                    eff.merge(self._fail_step(s, step.id, f"worker lost the step {step.attempts} times"))
                else:
                    eff.steps.append(step.id)
            eff.finalize += list(
                s.scalars(select(Job.id).where(Job.status == JobStatus.RUNNING.value, Job.open_chains <= 0))
            )
        return eff

    # -- internals -----------------------------------------------------------------------
    def _new_round(self, s: Session, chain: Chain, kind: RoundKind, workflow: Workflow | None = None) -> int:
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
        return rnd.id

    def _start_workflow(self, s: Session, rnd: Round, workflow: Workflow) -> list[int]:
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

    def _after_unparseable(self, s: Session, rnd: Round) -> Effects:
        chain = rnd.chain
        if rnd.kind == RoundKind.REPLAN.value:
            # A garbled replan keeps the answer the chain already has.
            previous = self._latest_answer_round(s, chain.id, before=rnd.round_index)
            return self._finish_chain(s, chain.id, ChainStatus.DONE, answer=previous.answer if previous else None)
        failures = sum(1 for r in chain.rounds if r.status == RoundStatus.UNPARSEABLE.value)
        if failures <= self.settings.plan_retries and chain.rounds_used < self.settings.max_rounds:
            return Effects(plans=[self._new_round(s, chain, RoundKind.PLAN)])
        fallback_name = self.settings.fallback_worker or self.pool.fallback_worker
        if fallback_name:
            index = [w.name for w in self.pool.workers].index(self.pool.worker(fallback_name).name)
            fallback = Workflow.from_lists([index], [chain.question], [[]])
            chain.rounds_used += 1
            fb = Round(
                chain_id=chain.id,
                job_id=chain.job_id,
                round_index=chain.rounds_used - 1,
                kind=RoundKind.FALLBACK.value,
                status=RoundStatus.PLANNING.value,
                parse_status=None,
            )
            s.add(fb)
            s.flush()
            return Effects(steps=self._start_workflow(s, fb, fallback))
        return self._finish_chain(
            s, chain.id, ChainStatus.FAILED, error=f"no valid plan after {failures} attempts: {rnd.parse_error}"
        )

    def _complete_step(
        self,
        s: Session,
        step_id: int,
        output: str,
        model: str | None,
        prompt_tokens: int,
        completion_tokens: int,
        cost_usd: float,
        latency_s: float | None,
    ) -> Effects:
        eff = Effects()
        row = s.execute(
            update(Step)
            .where(Step.id == step_id, Step.status == StepStatus.RUNNING.value)
            .values(
                status=StepStatus.DONE.value,
                output=output,
                model=model,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                cost_usd=cost_usd,
                latency_s=latency_s,
                finished_at=now(),
                lease_until=None,
            )
            .returning(Step.round_id, Step.step_index, Step.job_id)
        ).first()
        if row is None:
            return eff  # already recorded by an earlier delivery
        round_id, index, job_id = row
        self._add_usage(s, job_id, prompt_tokens, completion_tokens, cost_usd)
        rnd = s.get_one(Round, round_id)
        if rnd.status != RoundStatus.RUNNING.value:
            return eff
        successors = Workflow.from_lists(**(rnd.workflow or {})).successors(index)
        if successors:
            released = s.execute(
                update(Step)
                .where(Step.round_id == round_id, Step.step_index.in_(successors))
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
                eff.steps += now_ready
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
            return Effects(replans=[self._new_round(s, chain, RoundKind.REPLAN)])
        return self._finish_chain(s, chain.id, ChainStatus.DONE, answer=answer)

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
        ended = _updated(
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

    def _end_chain_after_failure(self, s: Session, chain_id: int, error: str) -> Effects:
        previous = self._latest_answer_round(s, chain_id)
        if previous is not None:
            # A failed improvement attempt keeps the answer the chain already had.
            return self._finish_chain(s, chain_id, ChainStatus.DONE, answer=previous.answer)
        return self._finish_chain(s, chain_id, ChainStatus.FAILED, error=error)

    def _finish_chain(
        self, s: Session, chain_id: int, status: ChainStatus, *, answer: str | None = None, error: str | None = None
    ) -> Effects:
        if status == ChainStatus.DONE and answer is None:
            status, error = ChainStatus.FAILED, error or "chain ended without an answer"
        ended = _updated(
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
                return self._complete_step(s, chain.parent_step_id, answer or "", "conductor", 0, 0, 0.0, None)
            return self._fail_step(s, chain.parent_step_id, f"nested workflow failed: {error}")
        left = s.execute(
            update(Job).where(Job.id == chain.job_id).values(open_chains=Job.open_chains - 1).returning(Job.open_chains)
        ).scalar_one()
        return Effects(finalize=[chain.job_id]) if left == 0 else Effects()

    def _max_steps(self, job: Job) -> int:
        return min(int(job.options.get("max_steps", self.settings.max_steps)), self.settings.max_steps)

    def _latest_answer_round(self, s: Session, chain_id: int, before: int | None = None) -> Round | None:
        q = select(Round).where(Round.chain_id == chain_id, Round.status == RoundStatus.DONE.value)
        if before is not None:
            q = q.where(Round.round_index < before)
        return s.scalar(q.order_by(Round.round_index.desc()).limit(1))

    def _add_usage(self, s: Session, job_id: str, prompt_tokens: int, completion_tokens: int, cost: float) -> None:
        if prompt_tokens or completion_tokens or cost:
            s.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(
                    prompt_tokens=Job.prompt_tokens + prompt_tokens,
                    completion_tokens=Job.completion_tokens + completion_tokens,
                    cost_usd=Job.cost_usd + cost,
                )
            )
