"""The number verifier (GSM8K style) takes the final number a reply commits to and compares it
exactly: commas, dollar signs, trailing periods, negatives and decimal forms all normalise."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conductor.domain.problem import Problem
from reward_pipeline.verifiers.number import NumberVerifier, extract_final_number, reference_number
from tests.reward_pipeline._data import gsm8k

NV = NumberVerifier()


def gsm_problem(answer: str) -> Problem:
    return Problem(question="How many?", answer=answer, kind="math", metadata={"source": "gsm8k"})


def test_every_gsm8k_reference_number_verifies_in_common_reply_shapes():
    rows = gsm8k()
    assert len(rows) == 1319
    failed = []
    for r in rows:
        final = r["answer"].split("####")[-1].strip()
        p = gsm_problem(r["answer"])  # the full solution text; the reference is after ####
        for reply in (r["answer"], f"The answer is {final}.", f"So she makes $\\boxed{{{final}}}$", f"#### {final}"):
            v = NV.verify(reply, p)
            if not v.correct:
                failed.append((final, reply[-60:], v.reason))
    assert failed == []


def test_gsm8k_wrong_numbers_fail():
    for r in gsm8k()[:50]:
        final = int(r["answer"].split("####")[-1].strip().replace(",", ""))
        v = NV.verify(f"The answer is {final + 1}.", gsm_problem(r["answer"]))
        assert not v.correct
        assert v.reason.startswith(f"extracted {final + 1}, but expected {final}")


@pytest.mark.parametrize(
    ("reply", "reference"),
    [
        ("The total is 1,234 apples.", "1234"),
        ("She pays $18.", "18"),
        ("She pays \\$18.00 in total.", "18"),
        ("#### 42", "42"),
        ("42.0", "42"),
        ("The temperature drops to -7 degrees.", "-7"),
        ("Answer: −7", "-7"),
        ("It is 2.50 dollars", "2.5"),
        ("so 3 + 4 = 7. The answer is 7", "7"),
        ("First 5, then 10, finally 15.", "15"),
        ("The answer is 1,000,000.", "1000000"),
        ("\\boxed{\\frac{3}{4}}", "0.75"),
        ("The answer is 12 dollars. Check: 3 * 4 = 12", "12"),
        ("The final answer is $1,234.", "1,234"),
    ],
)
def test_number_forms(reply, reference):
    v = NV.verify(reply, gsm_problem(reference))
    assert v.correct, v.reason


@pytest.mark.parametrize(
    ("reply", "reference"),
    [
        ("The answer is 41.", "42"),
        ("no number here", "42"),
        ("-42", "42"),
        ("42.5", "42"),
        ("The answer is 18. Wait, 3 + 4 = 7.", "7"),  # the committed answer beats a later number
    ],
)
def test_wrong_or_missing_numbers_fail(reply, reference):
    assert not NV.verify(reply, gsm_problem(reference)).correct


def test_the_answer_phrase_beats_the_last_number():
    value, _, where = extract_final_number("The answer is 18. Check: 9 * 2 = 18, and 3 + 4 = 7.")
    assert value == 18 and where == "answer is"


def test_reference_number_reads_the_gsm8k_solution_field():
    assert reference_number("She has 3 + 4 = <<3+4=7>>7 apples.\n#### 7") == Fraction(7)
    assert reference_number("1,234") == Fraction(1234)


@given(st.integers(min_value=-(10**12), max_value=10**12))
def test_any_integer_round_trips_with_thousands_separators(n):
    reply = f"So the total comes to {n:,}."
    assert NV.verify(reply, gsm_problem(str(n))).correct
