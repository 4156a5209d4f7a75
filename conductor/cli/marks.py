"""Right or wrong, for problems that come with a reference: what `conductor run` and `make demo` print.

The verdict is the reward pipeline's own (`score_job`: the same verifiers and rows GRPO trains on),
taken for the chain whose answer the job returned, so the mark and the stored reward never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conductor.domain.errors import ConductorError
from conductor.domain.problem import Problem

if TYPE_CHECKING:  # `conductor --help` must not import SQLAlchemy
    from sqlalchemy.orm import Session, sessionmaker


@dataclass(frozen=True)
class Verdict:
    reference: str | None  #: what the answer was checked against (the answer, or "tests"/"rubric")
    correct: bool | None  #: None: no reference, or no verdict could be reached

    @property
    def mark(self) -> str:
        return {True: "RIGHT", False: "WRONG", None: "unchecked"}[self.correct]


def verdict(sessions: sessionmaker[Session], job_id: str) -> Verdict:
    from conductor.store import queries
    from reward_pipeline.rewards import score_job

    with sessions() as s:
        job = queries.get_job(s, job_id)
        problem = Problem.model_validate(job.problem)
        answer_chain = job.answer_chain_id
    reference = problem.answer or ("tests" if problem.tests else "rubric" if problem.rubric else None)
    if reference is None:
        return Verdict(None, None)
    try:
        rows = score_job(sessions, job_id)
    except ConductorError:  # a job that did not finish, or a verifier that could not decide
        return Verdict(reference, None)
    chains = [r for r in rows if r.chain_id is not None]
    chosen = [r for r in chains if r.chain_id == answer_chain] or chains
    return Verdict(reference, bool(chosen[0].correct) if chosen and chosen[0].correct is not None else None)


class Scoreboard:
    """Counts verdicts for the one-line score at the end of a run."""

    def __init__(self) -> None:
        self.right = 0
        self.checked = 0

    def add(self, v: Verdict) -> None:
        if v.correct is not None:
            self.checked += 1
            self.right += int(v.correct)

    def line(self) -> str | None:
        if not self.checked:
            return None
        return f"score: {self.right}/{self.checked} right ({100 * self.right / self.checked:.0f}%)"


def annotate(line: dict[str, Any], v: Verdict) -> dict[str, Any]:
    """A result line with its reference and verdict (only for problems that have a reference)."""
    return line if v.reference is None else {**line, "reference": v.reference, "correct": v.correct}
