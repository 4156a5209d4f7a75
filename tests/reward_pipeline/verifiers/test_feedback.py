"""User feedback (a score, a bool, thumbs up/down) becomes a `feedback` verdict."""

from __future__ import annotations

import pytest

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.feedback import FeedbackVerifier, feedback_score, verdict_from_feedback


@pytest.mark.parametrize(
    ("value", "score"),
    [
        (True, 1.0),
        (False, 0.0),
        (1, 1.0),
        (0, 0.0),
        (0.8, 0.8),
        ("thumbs up", 1.0),
        ("Thumbs_Down", 0.0),
        ("👍", 1.0),
        ("👎", 0.0),
        (":thumbsup:", 1.0),
        ("up", 1.0),
        ("down", 0.0),
        ("+1", 1.0),
        ("-1", 0.0),
        ("0.25", 0.25),
        ("80%", 0.8),
        ("4/5", 0.8),
    ],
)
def test_feedback_values_become_scores(value, score):
    assert feedback_score(value) == pytest.approx(score)


@pytest.mark.parametrize("value", [1.5, -0.1, float("nan"), "meh", "6/5", None, [1]])
def test_invalid_feedback_is_an_error(value):
    with pytest.raises(VerifierError):
        feedback_score(value)


def test_verdict_uses_the_threshold():
    good = verdict_from_feedback(0.7, threshold=0.5)
    bad = verdict_from_feedback("thumbs down")
    assert good.correct and good.verifier == "feedback" and good.score == pytest.approx(0.7)
    assert not bad.correct and bad.score == 0.0 and "thumbs down" in bad.reason
    assert not verdict_from_feedback(0.7, threshold=0.9).correct


def test_verifier_reads_feedback_from_problem_metadata():
    p = Problem(question="q", metadata={"feedback": "👍"})
    v = FeedbackVerifier().verify("any answer", p)
    assert v.correct and v.score == 1.0
    with pytest.raises(VerifierError):
        FeedbackVerifier().verify("any answer", Problem(question="q"))
    assert not FeedbackVerifier(False).verify("x", p).correct  # explicit feedback wins
