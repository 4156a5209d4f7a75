"""Rewards for jobs without a reference: the group judge scores a job's samples against each other.

The group of a job is its own top-level samples plus those of its exploration jobs (extra samples
run after the user's answer, `Job.explore_of`), all of one tenant: a judge prompt is
built from one group only and the tenant of every member is checked, so it never carries another
tenant's data.

What `judge_job` writes, once every member of the group has finished:

* a `judgements` row, ok or failed (or skipped: fewer than two samples answered), with the judge worker and model, rubric version, the shuffled
  order of every try, tries, tokens and cost (the judge is a pool worker: a call like any other);
* when ok, one chain reward per judged sample (`source="judge"`, `judge_model`, `rubric_version`).
  The judge's score s in [0, 1] maps onto the scheme's [wrong, right] range, as user feedback
  does: an unparseable plan's 0 stays below every parsed answer, and all sources share one scale;
* the paper's 0 (`source="parse"`) for a sample with no parseable plan and for every unparseable
  round, whether or not the judge answered.

A failed judgement writes no chain reward: an unjudged sample is not a wrong one. A sample that
parsed but ended without an answer (an infrastructure failure) is not shown to the judge and gets
no reward. Idempotent: a group with an ok judgement over the same samples is not judged again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from conductor.config.pool import Pool
from conductor.config.settings import Settings
from conductor.domain.errors import ConfigError, InputError
from conductor.domain.problem import Problem
from conductor.domain.states import TERMINAL_JOB, ChainStatus, ParseStatus, RoundKind
from conductor.inference.gateway import Gateway
from conductor.store import queries
from conductor.store.models import Chain, Job, Judgement, Reward
from reward_pipeline.rewards import PAPER_SCHEME, PARSE_VERIFIER, RewardScheme, unparseable_round_reward
from reward_pipeline.verifiers.group_judge import Candidate, GroupJudge, GroupJudgement

__all__ = ["GROUP_JUDGE", "JUDGE_SOURCE", "group_jobs", "judge_job", "make_group_judge"]

log = logging.getLogger(__name__)

JUDGE_SOURCE = "judge"
GROUP_JUDGE = "group_judge"


@dataclass(frozen=True)
class _Member:
    job_id: str
    chain_id: int
    last_round_id: int | None
    answer: str | None
    workflow: str
    ever_parsed: bool


def make_group_judge(
    settings: Settings, pool: Pool, gateway: Gateway, worker: str | None = None
) -> tuple[GroupJudge, str] | None:
    """A GroupJudge over the configured judge worker, and that worker's name; None if none is configured."""
    from reward_pipeline.judge_client import judge_worker_name

    name = judge_worker_name(settings, pool, worker)
    if name is None:
        return None
    try:
        pool.worker(name)
    except ConfigError as exc:
        raise ConfigError(f"judge worker: {exc}") from exc
    judge = GroupJudge(
        lambda messages: gateway.call_worker(name, messages),
        attempts=settings.judge_attempts,
        backoff_s=settings.judge_backoff_s,
    )
    return judge, name


def group_jobs(s: Any, job_id: str) -> tuple[Job, list[Job]]:
    """The group's user job and its exploration jobs, whichever of them `job_id` names."""
    job = queries.get_job(s, job_id)
    root_id = job.explore_of or job.id
    root = job if root_id == job.id else queries.get_job(s, root_id)
    explorers = list(s.scalars(select(Job).where(Job.explore_of == root.id).order_by(Job.created_at)))
    return root, explorers


def judge_job(
    sessions: sessionmaker[Session], job_id: str, judge: GroupJudge, worker: str, *, scheme: RewardScheme = PAPER_SCHEME
) -> Judgement | None:
    """Judge the group `job_id` belongs to, once all its members have finished (see the module doc).

    Returns the judgement row (ok or failed), or None when there is nothing to judge yet (a
    member still running, fewer than two answers) or the group was already judged.
    """
    with sessions() as s:
        root, explorers = group_jobs(s, job_id)
        jobs = [root, *explorers]
        if any(j.status not in TERMINAL_JOB for j in jobs):
            return None  # the last member to finish triggers the judgement
        tenants = {j.tenant_id for j in jobs}
        if len(tenants) != 1:  # never happens by construction; never send one tenant's data with another's
            raise InputError(f"group of job {root.id} spans tenants {sorted(map(str, tenants))}")
        problem = Problem.model_validate(root.problem)
        if problem.has_reference:
            return None  # verifiers score it
        members = [_member(j.id, c) for j in jobs for c in queries.top_chains(j)]
        if _already_judged(s, root.id, members):
            return None
        bad_rounds = [(j.id, r.id, r.parse_error) for j in jobs for r in queries.unparseable_rounds(s, j.id)]
        root_id, tenant_id, exploring = root.id, root.tenant_id, bool(explorers)

    answered = [m for m in members if m.answer is not None]
    verdict: GroupJudgement | None = None
    if len(answered) >= 2:  # one answer alone has nothing to be ranked against
        verdict = judge.judge(problem.question, [Candidate(m.answer or "", m.workflow) for m in answered])

    with sessions.begin() as s:
        s.execute(update(Job).where(Job.id == root_id).values(answer_chain_id=Job.answer_chain_id))  # lock
        if _already_judged(s, root_id, members):
            return None
        ids = [m.job_id for m in members]
        s.execute(delete(Reward).where(Reward.job_id.in_(ids), Reward.source.in_((JUDGE_SOURCE, "parse"))))
        rows: list[Reward] = [_parse_reward(m, scheme) for m in members if m.answer is None and not m.ever_parsed]
        rows += [unparseable_round_reward(jid, rid, err, scheme) for jid, rid, err in bad_rounds]
        record = None
        if verdict is not None:
            record = _record(root_id, tenant_id, worker, judge, answered, verdict, exploring)
            if verdict.ok and verdict.scores is not None:
                rows += [
                    _judge_reward(m, score, verdict, judge, scheme)
                    for m, score in zip(answered, verdict.scores, strict=True)
                ]
        elif len(members) > 1:  # a group that ended with fewer than two answers: nothing to rank, recorded
            record = Judgement(
                job_id=root_id, tenant_id=tenant_id, status="skipped", worker=worker, rubric_version=judge.rubric.version,
                chain_ids=[m.chain_id for m in answered], order=[], attempts=0, exploration=exploring,
                error=f"{len(answered)} of {len(members)} samples answered: nothing to rank",
            )  # fmt: skip
        if record is not None:
            s.add(record)
        s.add_all(rows)
        s.flush()
        if record is not None:
            s.expunge(record)
    if verdict is not None and not verdict.ok:
        log.warning("judging job %s failed after %d tries: %s", root_id, verdict.attempts, verdict.error)
    return record


def _member(job_id: str, c: Chain) -> _Member:
    rounds = sorted(c.rounds, key=lambda r: r.round_index)
    parsed = any(r.parse_status in (ParseStatus.OK, ParseStatus.ACCEPT) or r.kind == RoundKind.FIXED for r in rounds)
    workflow = next((r.workflow for r in reversed(rounds) if r.workflow), None)
    return _Member(
        job_id=job_id,
        chain_id=c.id,
        last_round_id=rounds[-1].id if rounds else None,
        answer=c.answer if c.status == ChainStatus.DONE else None,
        workflow=_summary(workflow),
        ever_parsed=parsed,
    )


def _summary(workflow: dict[str, Any] | None) -> str:
    """`alpha: "subtask" -> beta: "subtask"`: what the judge needs to see how an answer was reached."""
    if not workflow:
        return ""
    workers = workflow.get("model_id") or workflow.get("workers") or []
    subtasks = workflow.get("subtasks") or []
    steps = [f"worker {w}: {str(t)[:200]!r}" for w, t in zip(workers, subtasks, strict=False)]
    return " -> ".join(steps)


def _already_judged(s: Any, root_id: str, members: list[_Member]) -> bool:
    chain_ids = sorted(m.chain_id for m in members if m.answer is not None)
    done = s.scalars(
        select(Judgement.chain_ids).where(Judgement.job_id == root_id, Judgement.status.in_(("ok", "skipped")))
    )
    return any(sorted(ids) == chain_ids for ids in done)


def _record(
    root_id: str,
    tenant_id: str | None,
    worker: str,
    judge: GroupJudge,
    answered: list[_Member],
    verdict: GroupJudgement,
    exploring: bool,
) -> Judgement:
    return Judgement(
        job_id=root_id,
        tenant_id=tenant_id,
        status="ok" if verdict.ok else "failed",
        worker=worker,
        judge_model=verdict.model,
        rubric_version=judge.rubric.version,
        chain_ids=[m.chain_id for m in answered],
        order=verdict.orders,
        scores=verdict.scores,
        attempts=verdict.attempts,
        error=verdict.error,
        exploration=exploring,
        prompt_tokens=verdict.prompt_tokens,
        completion_tokens=verdict.completion_tokens,
        cost_usd=verdict.cost_usd,
    )


def _judge_reward(m: _Member, score: float, verdict: GroupJudgement, judge: GroupJudge, scheme: RewardScheme) -> Reward:
    return Reward(
        job_id=m.job_id,
        chain_id=m.chain_id,
        round_id=m.last_round_id,
        value=scheme.wrong + (scheme.right - scheme.wrong) * score,
        correct=None,  # a relative score, not a verdict of right or wrong
        verifier=GROUP_JUDGE,
        source=JUDGE_SOURCE,
        judge_model=verdict.model,
        rubric_version=judge.rubric.version,
        details={"kind": "chain", "score": score, "order": verdict.orders[-1], "attempts": verdict.attempts},
    )


def _parse_reward(m: _Member, scheme: RewardScheme) -> Reward:
    return Reward(
        job_id=m.job_id,
        chain_id=m.chain_id,
        round_id=m.last_round_id,
        value=scheme.unparseable,
        correct=False,
        verifier=PARSE_VERIFIER,
        source="parse",
        details={"kind": "chain", "reason": "no parseable workflow"},
    )
