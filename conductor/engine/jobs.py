"""Jobs: start one (its chains and first rounds), count model calls against its budgets, close it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from conductor.domain.effects import Effects
from conductor.domain.problem import Problem
from conductor.domain.states import ChainStatus, JobStatus, RoundKind, RoundStatus
from conductor.domain.workflow import Workflow
from conductor.engine.transitions import Transitions, budget_spent, inserted_ids, now, updated
from conductor.store import queries
from conductor.store.models import Job, Tenant
from conductor.store.tables import chains, jobs, rounds


class JobRules(Transitions):
    def start_job(self, job_id: str) -> Effects:
        return self.start_jobs([job_id])

    def start_jobs(self, job_ids: list[str]) -> Effects:
        """Start queued jobs in one transaction: each sample's chain and first round (a fixed
        workflow's round running with its steps), in a few batched statements whatever the count.
        Jobs no longer queued (started by another delivery, cancelled) are left as they are."""
        eff = Effects()
        if not job_ids:
            return eff
        with self.sessions.begin() as s:
            started = s.execute(
                update(jobs)
                .where(self._among(jobs.c.id, sorted(job_ids)), jobs.c.status == JobStatus.QUEUED)
                .values(
                    status=JobStatus.RUNNING,
                    started_at=now(),
                    open_chains=jobs.c.samples,
                    # The job started: the reaper's count starts again for finalize.
                    sent_at=None,
                    sends=0,
                )
                .returning(jobs.c.id, jobs.c.problem, jobs.c.samples, jobs.c.options)
            ).all()
            if not started:
                return eff
            samples = [(job_id, sample, options) for job_id, _, n, options in started for sample in range(n)]
            questions = {job_id: Problem.model_validate(problem).question for job_id, problem, _, _ in started}
            chain_ids = inserted_ids(
                s,
                chains,
                [
                    {"job_id": job, "sample_index": sample, "depth": 0, "question": questions[job], "rounds_used": 1}
                    for job, sample, _ in samples
                ],
            )
            fixed = [_fixed_workflow(options) for _, _, options in samples]
            round_ids = inserted_ids(
                s,
                rounds,
                [
                    {
                        "chain_id": chain_id,
                        "job_id": job_id,
                        "round_index": 0,
                        "kind": RoundKind.FIXED if wf else RoundKind.PLAN,
                        "status": RoundStatus.RUNNING if wf else RoundStatus.PLANNING,
                        "workflow": wf.to_lists() if wf else None,
                        "n_steps": len(wf.steps) if wf else 0,
                    }
                    for chain_id, (job_id, _, _), wf in zip(chain_ids, samples, fixed, strict=True)
                ],
            )
            for round_id, (job_id, _, _), wf in zip(round_ids, samples, fixed, strict=True):
                if wf:
                    eff.steps += self._insert_step_rows(s, round_id, job_id, wf)
                else:
                    eff.plans.append(round_id)
        return eff

    def reserve_call(self, job_id: str) -> None:
        """Count one model call against the job's budgets; raises BudgetExceeded when one is spent.

        Budgets are checked before each call: a call's own size is unknown until it returns,
        so the last admitted call can overshoot a token or USD budget by at most its own cost.
        """
        with self.sessions.begin() as s:
            spent = self._reserve(s, job_id)
        if spent is not None:
            raise spent

    def finalize(self, job_id: str) -> bool:
        """Close a job whose chains all ended. Returns True if this call closed it.

        The answer is the first successful sample's; with a verifier, scoring later moves it
        to the best-scoring sample (reward_pipeline.rewards). A job whose every sample failed
        with a budget spent ends as budget_exceeded.
        """
        with self.sessions.begin() as s:
            return self._finalize(s, job_id) is not None

    def close_job(self, job_id: str) -> Effects:
        """`finalize`, and the job's scoring if this call closed it, in one transaction: verifiers
        when its problem has a reference, else (with `group_judge` on) the group judge when there
        is a group to judge or to start (G > 1, an exploration job, a tenant that opted in)."""
        with self.sessions.begin() as s:
            job = self._finalize(s, job_id)
            if job is None:
                return Effects()
            if Problem.model_validate(job.problem).has_reference or self._judgeable(s, job):
                return Effects(score=[job_id])
            return Effects()

    def _judgeable(self, s: Session, job: Job) -> bool:
        if not self.settings.group_judge:
            return False
        if job.samples > 1 or job.explore_of is not None:
            return True
        tenant = s.get(Tenant, job.tenant_id) if job.tenant_id else None
        return tenant is not None and tenant.exploration is True and self.settings.exploration_rate > 0

    def _finalize(self, s: Session, job_id: str) -> Job | None:
        job = s.get_one(Job, job_id)
        if job.status != JobStatus.RUNNING or job.open_chains > 0:
            return None
        chains = queries.top_chains(job)
        done = [c for c in chains if c.status == ChainStatus.DONE]
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
            .where(Job.id == job_id, Job.status == JobStatus.RUNNING)
            .values(
                status=status,
                answer=answer,
                error=error,
                answer_chain_id=chain_id,
                finished_at=now(),
                sent_at=None,  # closed: the reaper's count starts again for the score message
                sends=0,
            ),
        )
        return job if closed else None


def _fixed_workflow(options: dict[str, Any] | None) -> Workflow | None:
    """The workflow a job fixed in its options (the Conductor is not asked), if any."""
    spec = (options or {}).get("workflow")
    return Workflow.from_lists(**spec) if spec else None
