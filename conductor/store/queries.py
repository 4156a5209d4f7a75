"""The reads several layers share: a job, its top-level chains, its rewards, its result line.

Each takes an open session; none commits. Written once here so the engine, the service, the
reward pipeline and evaluation ask the same question the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, exists, func, or_, select
from sqlalchemy.orm import Session

from conductor.domain.errors import NotFound
from conductor.domain.problem import Problem
from conductor.domain.states import TERMINAL_JOB, JobStatus, RoundKind, RoundStatus
from conductor.store.models import Chain, Checkpoint, Job, Judgement, Reward, Round, Tenant

VERIFIER = "verifier"  #: `Reward.source` of rewards a verifier wrote (not a user's feedback)
#: The sources the scorer writes (a verifier's verdict, and the paper's 0 for an unparseable plan).
SCORED = (VERIFIER, "parse")
TERMINAL = [s.value for s in TERMINAL_JOB]


def get_job(s: Session, job_id: str) -> Job:
    """The job, or NotFound."""
    job = s.get(Job, job_id)
    if job is None:
        raise NotFound(f"no job {job_id}")
    return job


def top_chains(job: Job) -> list[Chain]:
    """The job's samples (chains that are not nested Conductor calls), by sample index."""
    return sorted((c for c in job.chains if c.parent_step_id is None), key=lambda c: c.sample_index)


def job_rewards(s: Session, job_id: str) -> list[Reward]:
    """Every reward of a job, oldest first."""
    return list(s.scalars(select(Reward).where(Reward.job_id == job_id).order_by(Reward.id)))


def verifier_rewards(s: Session, job_id: str, *, chains_only: bool = False) -> list[Reward]:
    """The verifier rewards of a job, oldest first; `chains_only`: only the per-sample ones."""
    q = select(Reward).where(Reward.job_id == job_id, Reward.source.in_(SCORED))
    if chains_only:
        q = q.where(Reward.chain_id.is_not(None))
    return list(s.scalars(q.order_by(Reward.id)))


def scored(s: Session, job_ids: Iterable[str]) -> set[str]:
    """Which of these jobs have per-sample verifier rewards."""
    ids = list(job_ids)
    if not ids:
        return set()
    q = select(Reward.job_id).where(Reward.job_id.in_(ids), Reward.source.in_(SCORED), Reward.chain_id.is_not(None))
    return set(s.scalars(q))


def ended(s: Session, job_ids: Iterable[str]) -> set[str]:
    """Which of these jobs are in a terminal state."""
    return set(s.scalars(select(Job.id).where(Job.id.in_(list(job_ids)), Job.status.in_(TERMINAL))))


def count_ended(s: Session, job_ids: list[str]) -> int:
    return s.scalar(select(func.count()).where(Job.id.in_(job_ids), Job.status.in_(TERMINAL))) or 0


def has_reference(s: Session, job_id: str) -> bool:
    """Whether the job's problem carries something to check answers against (answer, tests, rubric)."""
    problem = s.scalar(select(Job.problem).where(Job.id == job_id))
    return bool(problem) and Problem.model_validate(problem).has_reference


def unscored_jobs(s: Session, *, older_than_s: float, limit: int = 500) -> list[str]:
    """Finished jobs with a reference but no verifier reward: their score task was lost."""
    cutoff = datetime.now(UTC) - timedelta(seconds=older_than_s)
    rows = s.execute(
        select(Job.id, Job.problem)
        .where(
            Job.status == JobStatus.DONE.value,
            Job.finished_at < cutoff,
            ~exists().where(Reward.job_id == Job.id, Reward.source.in_(SCORED)),
        )
        .limit(limit)
    ).all()
    return [job_id for job_id, problem in rows if Problem.model_validate(problem).has_reference]


def unjudged_jobs(s: Session, *, older_than_s: float, within_s: float = 3600.0, limit: int = 500) -> list[str]:
    """Finished groups without a reference and without a judgement row (ok, failed or skipped): their
    score task was lost. Only jobs that finished in the last `within_s`: a cluster without a judge
    worker never writes a judgement, and must not be asked again forever."""
    now = datetime.now(UTC)
    root = func.coalesce(Job.explore_of, Job.id)
    rows = s.execute(
        select(Job.id, Job.problem)
        .where(
            Job.status == JobStatus.DONE.value,
            Job.finished_at < now - timedelta(seconds=older_than_s),
            Job.finished_at >= now - timedelta(seconds=within_s),
            or_(Job.samples > 1, Job.explore_of.is_not(None)),
            ~exists().where(Judgement.job_id == root),
        )
        .limit(limit)
    ).all()
    return [job_id for job_id, problem in rows if not Problem.model_validate(problem).has_reference]


def unparseable_rounds(s: Session, job_id: str) -> list[Round]:
    """The job's rounds whose completion held no workflow, nested chains included, oldest first."""
    q = select(Round).where(Round.job_id == job_id, Round.status == RoundStatus.UNPARSEABLE.value)
    return list(s.scalars(q.order_by(Round.id)))


def rescued_plan_rounds(s: Session, job_id: str) -> list[Round]:
    """The job's plans that gave an answer and were still answered again by the fallback worker (their
    answer was a tool miss), oldest first. An unparseable plan's round is not DONE, so not here."""
    rescued = select(Round.chain_id).where(Round.job_id == job_id, Round.kind == RoundKind.FALLBACK.value)
    q = select(Round).where(
        Round.job_id == job_id,
        Round.kind == RoundKind.PLAN.value,
        Round.status == RoundStatus.DONE.value,
        Round.chain_id.in_(rescued),
    )
    return list(s.scalars(q.order_by(Round.id)))


def latest_answer_round(s: Session, chain_id: int, before: int | None = None) -> Round | None:
    """The chain's newest round that produced an answer (before round index `before`, if given)."""
    q = select(Round).where(Round.chain_id == chain_id, Round.status == RoundStatus.DONE.value)
    if before is not None:
        q = q.where(Round.round_index < before)
    return s.scalar(q.order_by(Round.round_index.desc()).limit(1))


def job_seconds(job: Job) -> float | None:
    """Submit to finish, in seconds; None while the job runs."""
    if job.finished_at and job.created_at:
        return (job.finished_at - job.created_at).total_seconds()
    return None


def active_checkpoint(s: Session) -> Checkpoint | None:
    """The Conductor checkpoint every process serves now (None: the pool's own Conductor)."""
    return s.scalars(
        select(Checkpoint).where(Checkpoint.status == "active").order_by(Checkpoint.promoted_at.desc())
    ).first()


def _spend(model: type[Job] | type[Judgement]) -> tuple[Any, Any]:
    """Summed tokens and cost of the selected jobs or judgements (zero when none)."""
    return (
        func.coalesce(func.sum(model.prompt_tokens + model.completion_tokens), 0),
        func.coalesce(func.sum(model.cost_usd), 0.0),
    )


def background_usage(s: Session, *, batch_id: str | None = None, tenant_id: str | None = None) -> dict[str, Any]:
    """What training spends beside the users' jobs: exploration samples, and group-judge calls."""
    jobs = select(func.count(), *_spend(Job)).where(Job.explore_of.is_not(None))
    judged = select(func.count(), *_spend(Judgement)).where(Judgement.status != "skipped")
    if tenant_id is not None:
        jobs, judged = jobs.where(Job.tenant_id == tenant_id), judged.where(Judgement.tenant_id == tenant_id)
    if batch_id is not None:
        users = select(Job.id).where(Job.batch_id == batch_id)
        jobs, judged = jobs.where(Job.explore_of.in_(users)), judged.where(Judgement.job_id.in_(users))
    n_jobs, job_tokens, job_usd = s.execute(jobs).one()
    n_judged, judge_tokens, judge_usd = s.execute(judged).one()
    return {
        "exploration": {"jobs": int(n_jobs), "tokens": int(job_tokens), "cost_usd": float(job_usd)},
        "judging": {"judgements": int(n_judged), "tokens": int(judge_tokens), "cost_usd": float(judge_usd)},
    }


def exploration_spent_since(s: Session, since: datetime) -> tuple[int, float]:
    """Tokens and USD spent on exploration since `since`: its jobs and the judgements of explored groups."""
    tokens, usd = s.execute(select(*_spend(Job)).where(Job.explore_of.is_not(None), Job.created_at >= since)).one()
    j_tokens, j_usd = s.execute(
        select(*_spend(Judgement)).where(Judgement.exploration.is_(True), Judgement.created_at >= since)
    ).one()
    return int(tokens) + int(j_tokens), float(usd) + float(j_usd)


def trainable_jobs(default: bool) -> ColumnElement[bool]:
    """A `WHERE` on jobs: those whose traces may train the Conductor (`conductor.domain.consent`)."""
    agreed = (
        or_(Tenant.train_on_data.is_(True), Tenant.train_on_data.is_(None))
        if default
        else Tenant.train_on_data.is_(True)
    )
    return or_(Job.tenant_id.is_(None), Job.tenant_id.in_(select(Tenant.id).where(agreed)))
