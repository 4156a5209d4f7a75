"""Feedback verifier: turn a user's later judgement of an answer (a score in [0, 1], a bool, or a
thumbs up/down string) into a Verdict, so human feedback can reward traces like any verifier."""

from __future__ import annotations

import math
import re
from typing import Any

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.base import Verdict

__all__ = ["FeedbackVerifier", "feedback_score", "verdict_from_feedback"]

_POSITIVE = {"up", "thumbs up", "thumbsup", "thumbs_up", "thumbs-up", "+1", "👍", "good", "yes", "y", "true",
             "correct", "right", "like", "liked", "pass", "accept", "accepted", "positive", "ok"}  # fmt: skip
_NEGATIVE = {"down", "thumbs down", "thumbsdown", "thumbs_down", "thumbs-down", "-1", "👎", "bad", "no", "n",
             "false", "wrong", "incorrect", "dislike", "disliked", "fail", "reject", "rejected", "negative"}  # fmt: skip
_METADATA_KEYS = ("feedback", "user_feedback", "user_score")


def feedback_score(value: Any) -> float:
    """``value`` as a score in [0, 1].

    Accepts bools, numbers in [0, 1], numeric strings ("0.8", "80%", "4/5") and thumbs words or
    emoji ("up", "thumbs_down", "👍"). Raises VerifierError for anything else.
    """
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        x = float(value)
        if math.isnan(x) or not 0.0 <= x <= 1.0:
            raise VerifierError(f"feedback score must be in [0, 1], got {value!r}")
        return x
    if isinstance(value, str):
        s = re.sub(r"\s+", " ", value.strip().lower().replace(":", " ").strip())
        if s in _POSITIVE:
            return 1.0
        if s in _NEGATIVE:
            return 0.0
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(%|/\s*(\d+(?:\.\d+)?))?", s)
        if m:
            num = float(m.group(1))
            den = 100.0 if m.group(2) == "%" else float(m.group(3)) if m.group(3) else 1.0
            if den > 0 and 0 <= num <= den:
                return num / den
        raise VerifierError(f"unrecognised feedback {value!r}")
    raise VerifierError(f"unsupported feedback type {type(value).__name__}")


def verdict_from_feedback(value: Any, *, threshold: float = 0.5) -> Verdict:
    """A ``feedback`` Verdict: correct when the score is at least ``threshold``."""
    score = feedback_score(value)
    ok = score >= threshold
    return Verdict(
        ok,
        "feedback",
        f"user feedback {value!r} -> score {score:g}, {'>=' if ok else '<'} threshold {threshold:g}",
        {"feedback": value if isinstance(value, str | int | float | bool) else repr(value), "threshold": threshold},
        score=score,
    )


class FeedbackVerifier:
    """Verifier protocol adapter: reads the feedback from ``problem.metadata`` (or is given it)."""

    name = "feedback"

    def __init__(self, feedback: Any = None, *, threshold: float = 0.5) -> None:
        self.feedback = feedback
        self.threshold = threshold

    def verify(self, answer: str, problem: Problem) -> Verdict:
        value = self.feedback
        if value is None:
            value = next((problem.metadata[k] for k in _METADATA_KEYS if problem.metadata.get(k) is not None), None)
        if value is None:
            raise VerifierError(f"no user feedback recorded for problem {problem.id or '?'}")
        return verdict_from_feedback(value, threshold=self.threshold)
