"""Jobs: start one (its chains and first rounds), count model calls against its budgets, close it."""

from __future__ import annotations

from sqlalchemy import update

from conductor.domain.effects import Effects
from conductor.domain.errors import BudgetExceeded
from conductor.domain.problem import Problem
from conductor.domain.states import ChainStatus, JobStatus, RoundKind
from conductor.domain.workflow import Workflow
from conductor.engine.transitions import Transitions, now, updated
from conductor.store import queries
from conductor.store.models import Chain, Job


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


class JobRules(Transitions):
    def start_job(self, job_id: str) -> Effects:
        eff = Effects()
        with self.sessions.begin() as s:
            started = updated(
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
                    rnd = self._new_round(s, chain, RoundKind.FIXED)
                    eff.steps += self._start_workflow(s, rnd, Workflow.from_lists(**fixed))
                else:
                    eff.plans.append(self._new_round(s, chain, RoundKind.PLAN).id)
        return eff

    def reserve_call(self, job_id: str) -> None:
        """Count one model call against the job's budgets; raises BudgetExceeded when one is spent.

        Budgets are checked before each call: a call's own size is unknown until it returns,
        so the last admitted call can overshoot a token or USD budget by at most its own cost.
        """
        with self.sessions.begin() as s:
            admitted = updated(
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
                return
            spent = budget_spent(s.get_one(Job, job_id), self.settings.max_model_calls)
        raise spent or BudgetExceeded("a budget ran out while this call was admitted")

    def finalize(self, job_id: str) -> bool:
        """Close a job whose chains all ended. Returns True if this call closed it.

        The answer is the first successful sample's; with a verifier, scoring later moves it
        to the best-scoring sample (reward_pipeline.rewards). A job whose every sample failed
        with a budget spent ends as budget_exceeded.
        """
        with self.sessions.begin() as s:
            job = s.get_one(Job, job_id)
            if job.status != JobStatus.RUNNING.value or job.open_chains > 0:
                return False
            chains = queries.top_chains(job)
            done = [c for c in chains if c.status == ChainStatus.DONE.value]
            status, answer, error, chain_id = JobStatus.DONE, None, None, None
            if done:
                answer, chain_id = done[0].answer, done[0].id
            else:
                spent = budget_spent(job, self.settings.max_model_calls) is not None
                status = JobStatus.BUDGET_EXCEEDED if spent else JobStatus.FAILED
                error = "; ".join(f"sample {c.sample_index}: {c.error or 'unknown error'}" for c in chains)
            closed = updated(
                s,
                update(Job)
                .where(Job.id == job_id, Job.status == JobStatus.RUNNING.value)
                .values(status=status.value, answer=answer, error=error, answer_chain_id=chain_id, finished_at=now()),
            )
            return bool(closed)
