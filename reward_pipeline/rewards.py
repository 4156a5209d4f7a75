"""Reward assignment: turn a finished job's chains into `rewards` rows for GRPO.

The paper's scheme (`RewardScheme()`): a sampled workflow earns 0 when the Conductor's three
lists could not be parsed, 0.5 when they parsed but the executed workflow's final answer is
wrong, 1 when it is right.

What `score_job` writes, for one job:

* one **chain reward** per top-level chain (one per sample), on the chain's last round
  (`chain_id` and `round_id` set), from `verifier_for(problem)` applied to the chain's answer.
  A chain that ended without an answer gets the `unparseable` value when none of its rounds
  ever produced a workflow, and the `wrong` value otherwise (the plan parsed; the run failed);
  `details.failed` marks the latter so a trainer can drop infrastructure failures.
* one **round reward** (`unparseable`, verifier and source ``parse``) per unparseable Conductor round of
  the job, nested chains included. These carry `round_id` only, not `chain_id`: the trace
  export matches rewards by round *or* chain, so a chain id here would leak a 0 onto the
  chain's parsed rounds. They are inserted after the chain rewards so that, for the round
  itself, the round reward is the newest match.
* one **round reward** (`wrong`, verifier ``tool-miss``) per plan the fallback worker answered again
  because a tool missed (found nothing to run, or the calculator got no number of the question;
  `tool_miss_fallback`): the chain's reward is the fallback's answer's, the plan earns what its own
  answer earned.

Idempotent: a job that already has verifier rewards is not scored again (a duplicate task
delivery just returns the stored rows); `force=True` replaces them. The write transaction
starts with an UPDATE of the job row, which takes the row lock (PostgreSQL) or the write
lock (SQLite) before checking for existing rows, so two concurrent scorers cannot both insert.

Best-of-G: when a verifier exists and the job sampled G > 1 workflows, the job's answer is
re-picked here, after scoring, as the best-scoring sample (ties: lowest sample index). Why
here and not with an `AnswerChooser` at finalize: verifying means running a code sandbox, a
math-verify child or an LLM judge, seconds per sample; finalize is one short transaction on
the default queue, and verification belongs on the `reward` queue (prefork workers, its own
limits). The cost: between finalize and scoring the job shows the first finished sample's
answer (and the webhook carries that one).

User feedback (`record_feedback`) is a reward with `source="feedback"` on the job's answer
chain; a newer feedback replaces the older one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, update
from sqlalchemy.orm import Session, sessionmaker

from conductor.domain.errors import InputError, JobNotFinished, VerifierError
from conductor.domain.problem import Problem
from conductor.domain.states import TERMINAL_JOB, ChainStatus, JobStatus, ParseStatus, RoundKind
from conductor.store import queries
from conductor.store.models import Chain, Job, Reward
from reward_pipeline.verifiers import Verdict, Verifier, verdict_from_feedback, verifier_for

__all__ = [
    "PAPER_SCHEME",
    "JobNotFinished",
    "RewardScheme",
    "job_has_reference",
    "record_feedback",
    "score_job",
    "tool_miss_round_reward",
    "unparseable_round_reward",
]

log = logging.getLogger(__name__)

PARSE_VERIFIER = "parse"
TOOL_MISS_VERIFIER = "tool-miss"  #: `Reward.verifier` of a plan the fallback answered again after a tool miss
PARSE_SOURCE = "parse"  #: `Reward.source` of the paper's 0 for an unparseable plan
FEEDBACK = "feedback"


@dataclass(frozen=True)
class RewardScheme:
    """Reward values. The defaults are the paper's (0 / 0.5 / 1).

    `graded`: when a verdict carries a score in [0, 1] (LLM judge, user feedback), interpolate
    between `wrong` and `right` instead of using the binary verdict.
    """

    unparseable: float = 0.0
    wrong: float = 0.5
    right: float = 1.0
    graded: bool = False

    def value(self, verdict: Verdict) -> float:
        if self.graded and verdict.score is not None:
            return self.wrong + (self.right - self.wrong) * float(verdict.score)
        return self.right if verdict.correct else self.wrong


PAPER_SCHEME = RewardScheme()


@dataclass(frozen=True)
class _ChainSnap:
    id: int
    sample: int
    status: str
    answer: str | None
    error: str | None
    last_round_id: int | None
    ever_parsed: bool


def job_has_reference(sessions: sessionmaker[Session], job_id: str) -> bool:
    """Whether the job's problem carries something to check answers against (answer, tests, rubric)."""
    with sessions() as s:
        return queries.has_reference(s, job_id)


def unscored_jobs(sessions: sessionmaker[Session], *, older_than_s: float, limit: int = 500) -> list[str]:
    """Finished jobs with a reference but no verifier reward: their score task was lost."""
    with sessions() as s:
        return queries.unscored_jobs(s, older_than_s=older_than_s, limit=limit)


def score_job(
    sessions: sessionmaker[Session],
    job_id: str,
    *,
    judge: Verifier | None = None,
    scheme: RewardScheme = PAPER_SCHEME,
    verifier: Verifier | None = None,
    force: bool = False,
) -> list[Reward]:
    """Verify every top-level chain of a finished job and store its rewards (see the module doc).

    Returns the job's verifier-source reward rows (chain rewards by sample, then round
    rewards); each row's `details` holds the verdict (`reason`, `evidence`, `score`). Raises
    NotFound, JobNotFinished, or VerifierError when a verifier could not reach a verdict (then
    nothing is written: a group with a missing member would skew GRPO's group statistics).
    """
    with sessions() as s:
        job = queries.get_job(s, job_id)
        if job.status not in TERMINAL_JOB:
            raise JobNotFinished(f"job {job_id} is {job.status}; score it once it has finished")
        problem = Problem.model_validate(job.problem)
        check = verifier if verifier is not None else verifier_for(problem, judge=judge)
        if not force:
            existing = _verifier_rewards(s, job_id)
            if _complete(existing, check):
                return existing
        samples, status = job.samples, job.status
        chains = [_snap(c) for c in queries.top_chains(job)]
        bad_rounds = [(r.id, r.parse_error) for r in queries.unparseable_rounds(s, job_id)]
        missed_rounds = [r.id for r in queries.rescued_plan_rounds(s, job_id)]

    # Verification runs outside any transaction: it can take seconds per chain.
    verdicts: dict[int, Verdict] = {}
    if check is not None:
        for c in chains:
            if c.answer is not None:
                verdicts[c.id] = check.verify(c.answer, problem)

    with sessions.begin() as s:
        # Lock first (see the module doc), then look again: another scorer may have finished.
        s.execute(update(Job).where(Job.id == job_id).values(answer_chain_id=Job.answer_chain_id))
        existing = _verifier_rewards(s, job_id)
        if not force and _complete(existing, check):
            return existing
        if existing:
            s.execute(delete(Reward).where(Reward.id.in_([r.id for r in existing])))
        rows: list[Reward] = []
        if check is not None:
            rows += [_chain_reward(job_id, c, verdicts.get(c.id), check.name, scheme) for c in chains]
        rows += [unparseable_round_reward(job_id, rid, err, scheme) for rid, err in bad_rounds]
        rows += [tool_miss_round_reward(job_id, rid, scheme) for rid in missed_rounds]
        s.add_all(rows)
        s.flush()
        if check is not None and samples > 1 and status == JobStatus.DONE:
            _pick_best(s, job_id, rows, chains)
    return rows


def tool_miss_round_reward(job_id: str, round_id: int, scheme: RewardScheme) -> Reward:
    """A plan whose answer was a tool miss (nothing to run, or the calculator on an input with no number of the
    question): wrong, whatever the fallback then answered."""
    return Reward(
        job_id=job_id,
        round_id=round_id,
        value=scheme.wrong,
        correct=False,
        verifier=TOOL_MISS_VERIFIER,
        source="verifier",
        details={"kind": "round", "reason": "the plan's answer was a tool miss"},
    )


def unparseable_round_reward(job_id: str, round_id: int, error: str | None, scheme: RewardScheme) -> Reward:
    """A Conductor round whose plan did not parse: the scheme's penalty, on the round itself."""
    return Reward(
        job_id=job_id,
        chain_id=None,
        round_id=round_id,
        value=scheme.unparseable,
        correct=False,
        verifier=PARSE_VERIFIER,
        source=PARSE_SOURCE,
        details={"kind": "round", "reason": f"unparseable plan: {error or 'no workflow'}"},
    )


def record_feedback(
    sessions: sessionmaker[Session], job_id: str, value: Any, *, scheme: RewardScheme = PAPER_SCHEME
) -> Reward:
    """Store a user's judgement of a job's answer as a `feedback` reward on its answer chain.

    `value`: a score in [0, 1], a bool, or a thumbs word ("up", "down", "👍", "80%", "4/5").
    The stored value maps the score onto the scheme's [wrong, right] range, so verifier and
    feedback rewards share one scale. A newer feedback replaces the older one for the job.
    """
    try:
        verdict = verdict_from_feedback(value)
    except VerifierError as exc:
        raise InputError(str(exc)) from exc
    score = float(verdict.score if verdict.score is not None else verdict.correct)
    with sessions.begin() as s:
        job = queries.get_job(s, job_id)
        s.execute(delete(Reward).where(Reward.job_id == job_id, Reward.source == FEEDBACK))
        row = Reward(
            job_id=job_id,
            chain_id=job.answer_chain_id,
            round_id=None,
            value=scheme.wrong + (scheme.right - scheme.wrong) * score,
            correct=verdict.correct,
            verifier=FEEDBACK,
            source=FEEDBACK,
            details={
                "reason": verdict.reason,
                "score": score,
                "feedback": verdict.details.get("feedback"),
                "answer": (job.answer or "")[-2000:],
            },
        )
        s.add(row)
        s.flush()
    return row


# -- internals ---------------------------------------------------------------------------
def _verifier_rewards(s: Any, job_id: str) -> list[Reward]:
    rows = queries.verifier_rewards(s, job_id)
    for r in rows:
        s.expunge(r)
    return rows


def _complete(existing: list[Reward], check: Verifier | None) -> bool:
    """Already scored: chain rewards exist, or there is nothing to verify with and the round zeros exist.

    Round zeros alone do not count when a verifier is at hand now (an earlier scorer may have
    had no judge), so a later call with a judge completes the job's rewards.
    """
    if check is None:
        return bool(existing)
    return any(r.chain_id is not None for r in existing)


def _snap(c: Chain) -> _ChainSnap:
    rounds = sorted(c.rounds, key=lambda r: r.round_index)
    # A fallback workflow is the system's, not the Conductor's: it does not count as a parsed plan.
    parsed = any(r.parse_status in (ParseStatus.OK, ParseStatus.ACCEPT) or r.kind == RoundKind.FIXED for r in rounds)
    answer = c.answer if c.status == ChainStatus.DONE else None
    return _ChainSnap(c.id, c.sample_index, c.status, answer, c.error, rounds[-1].id if rounds else None, parsed)


def _chain_reward(job_id: str, c: _ChainSnap, verdict: Verdict | None, verifier: str, scheme: RewardScheme) -> Reward:
    details: dict[str, Any] = {"kind": "chain", "sample": c.sample}
    source = "verifier"
    if verdict is not None:
        value, correct, verifier = scheme.value(verdict), verdict.correct, verdict.verifier
        details.update(reason=verdict.reason, evidence=verdict.details, score=verdict.score)
    elif not c.ever_parsed:
        value, correct, verifier, source = scheme.unparseable, False, PARSE_VERIFIER, PARSE_SOURCE
        details.update(reason=f"no parseable workflow: {c.error or 'no answer'}")
    else:
        # Parsed but ended without an answer (a failed step, a budget): flagged so the trainer
        # can drop infrastructure failures rather than learn from them.
        value, correct = scheme.wrong, False
        details.update(reason=f"no answer: {c.error or c.status}", failed=True)
    return Reward(
        job_id=job_id,
        chain_id=c.id,
        round_id=c.last_round_id,
        value=value,
        correct=correct,
        verifier=verifier,
        source=source,
        details=details,
    )


def _pick_best(s: Any, job_id: str, rows: list[Reward], chains: list[_ChainSnap]) -> None:
    answers: dict[int | None, tuple[int, str]] = {c.id: (c.sample, c.answer) for c in chains if c.answer is not None}
    scored = [r for r in rows if r.chain_id in answers]
    if not scored:
        return
    best = max(scored, key=lambda r: (r.value, -answers[r.chain_id][0]))
    moved = s.execute(
        update(Job)
        .where(Job.id == job_id, Job.answer_chain_id != best.chain_id)
        .values(answer=answers[best.chain_id][1], answer_chain_id=best.chain_id)
    ).rowcount
    if moved:
        log.info(
            "job %s: best-of-%d answer is sample %d (reward %.2f)",
            job_id,
            len(chains),
            answers[best.chain_id][0],
            best.value,
        )
