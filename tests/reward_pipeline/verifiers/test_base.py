"""Shared pieces: answer extraction from free text and the choice of verifier per problem."""

from __future__ import annotations

from fractions import Fraction

import pytest

from conductor.domain.problem import Problem
from reward_pipeline.verifiers import (
    CodeVerifier,
    JudgeVerifier,
    MathVerifier,
    MultipleChoiceVerifier,
    NumberVerifier,
    TextVerifier,
    Verdict,
    Verifier,
    extract_boxed,
    extract_final_answer,
    last_number,
    parse_number,
    verifier_for,
)
from reward_pipeline.verifiers.feedback import FeedbackVerifier


@pytest.mark.parametrize(
    ("text", "boxes"),
    [
        (r"so \boxed{42}.", ["42"]),
        (r"\boxed{\frac{1}{2}} and then \boxed{\sqrt{\frac{a}{b}}}", [r"\frac{1}{2}", r"\sqrt{\frac{a}{b}}"]),
        (r"\boxed{\{1, 2\}}", [r"\{1, 2\}"]),
        (r"\fbox{7}", ["7"]),
        (r"\boxed {x^{2}}", ["x^{2}"]),
        (r"cut off \boxed{\frac{1}{2}", []),
        ("no box", []),
    ],
)
def test_extract_boxed_respects_nested_braces(text, boxes):
    assert extract_boxed(text) == boxes


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (r"Thus $\boxed{\frac{3}{4}}$. The answer is 5.", r"\frac{3}{4}"),
        ("work...\n#### 1,234", "1,234"),
        ("The answer is 12 apples.", "12 apples"),
        ("Final answer: x = 3.", "x = 3"),
        ("I computed 3, then 5, then 8", "8"),
        ("nothing numeric", None),
    ],
)
def test_extract_final_answer(text, answer):
    assert extract_final_answer(text) == answer


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1,234", Fraction(1234)),
        ("$18.", Fraction(18)),
        ("-3.25", Fraction(-13, 4)),
        (r"\frac{3}{4}", Fraction(3, 4)),
        (r"\dfrac12", Fraction(1, 2)),
        ("3/4 cup", Fraction(3, 4)),
        ("−5", Fraction(-5)),
        ("none", None),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_last_number_keeps_its_text():
    assert last_number("from 1,000 to -2,500.5 dollars") == "-2,500.5"


def judge_stub() -> JudgeVerifier:
    return JudgeVerifier(lambda messages: "SCORE: 10")


@pytest.mark.parametrize(
    ("problem", "expected"),
    [
        (Problem(question="q", kind="code", tests="assert f() == 1"), CodeVerifier),
        (Problem(question="q", tests="assert f() == 1"), CodeVerifier),
        (Problem(question="q", kind="mc", choices=["x", "y"], answer="A"), MultipleChoiceVerifier),
        (Problem(question="q", choices=["x", "y"], answer="B"), MultipleChoiceVerifier),
        (Problem(question="q", answer="C"), MultipleChoiceVerifier),
        (Problem(question="q", kind="math", answer="18", metadata={"source": "gsm8k"}), NumberVerifier),
        (Problem(question="q", kind="math", answer="1,234"), NumberVerifier),
        (Problem(question="q", kind="math", answer="x #### 7"), NumberVerifier),
        (Problem(question="q", kind="math", answer=r"\frac{1}{2}"), MathVerifier),
        (Problem(question="q", answer=r"(3, \frac{\pi}{2})"), MathVerifier),
        (Problem(question="q", kind="text", answer="Paris"), TextVerifier),
    ],
)
def test_verifier_for_routes_by_kind_and_reference(problem, expected):
    v = verifier_for(problem)
    assert isinstance(v, expected)
    assert isinstance(v, Verifier)  # the Protocol, checked at runtime


def test_rubric_problems_go_to_the_judge_only_when_one_is_given():
    p = Problem(question="Write a haiku about rain.", kind="text", rubric="5-7-5 syllables, about rain")
    judge = judge_stub()
    assert verifier_for(p, judge=judge) is judge
    assert verifier_for(p) is None


@pytest.mark.parametrize(
    "problem",
    [
        Problem(question="Tell me a joke.", kind="text"),
        Problem(question="q", kind="code"),  # code without tests cannot be checked
        Problem(question="q", kind="math"),  # no reference
    ],
)
def test_uncheckable_problems_get_no_verifier(problem):
    assert verifier_for(problem, judge=None) is None


def test_every_verifier_satisfies_the_protocol():
    for v in (CodeVerifier(), MathVerifier(), NumberVerifier(), MultipleChoiceVerifier(), judge_stub(),
              FeedbackVerifier(), TextVerifier()):  # fmt: skip
        assert isinstance(v, Verifier) and isinstance(v.name, str)


def test_verdict_is_immutable_and_serialisable():
    v = Verdict(True, "number", "extracted 42, expected 42", {"extracted": "42"})
    with pytest.raises(AttributeError):
        v.correct = False  # type: ignore[misc]
    assert v.as_dict() == {
        "correct": True,
        "verifier": "number",
        "reason": "extracted 42, expected 42",
        "details": {"extracted": "42"},
        "score": None,
    }
