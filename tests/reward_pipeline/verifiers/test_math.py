"""The math verifier decides equivalence with math-verify in a worker process: MATH-500 references
verify against themselves in a sentence, equivalent forms are equal, wrong answers fail, a
pathological answer times out into a failed verdict, and it works from non-main threads."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.math_equiv import MathVerifier, MathWorkerPool
from tests.reward_pipeline._data import math500


@pytest.fixture(scope="module")
def pool():
    p = MathWorkerPool(size=2)
    yield p
    p.close()


@pytest.fixture(scope="module")
def mv(pool):
    return MathVerifier(timeout_s=5.0, pool=pool)


def math_problem(answer: str) -> Problem:
    return Problem(question="Compute it.", answer=answer, kind="math")


def test_every_math500_reference_verifies_against_itself_boxed_in_a_sentence(mv):
    rows = math500()
    assert len(rows) == 500

    def check(row: dict):
        reply = f"Putting it together, the final answer is $\\boxed{{{row['answer']}}}$."
        return mv.verify(reply, math_problem(row["answer"]))

    with ThreadPoolExecutor(2) as ex:
        verdicts = list(ex.map(check, rows))
    failed = {r["unique_id"]: v.reason for r, v in zip(rows, verdicts, strict=True) if not v.correct}
    assert failed == {}


@pytest.mark.parametrize(
    ("reference", "answer"),
    [
        (r"\frac{1}{2}", "0.5"),
        (r"\frac{1}{2}", r"\dfrac12"),
        (r"\frac{1}{2}", r"The answer is $\dfrac{1}{2}$."),
        (r"\frac{1}{2}", "1/2"),
        ("0.5", r"\boxed{\frac12}"),
        (r"\sqrt{2}/2", r"\boxed{\frac{\sqrt{2}}{2}}"),
        (r"\frac{\sqrt{3}}{3}", r"\boxed{\frac{1}{\sqrt{3}}}"),
        ("(3, -1)", r"\boxed{(3,-1)}"),
        (r"\{1, 2\}", r"\boxed{\{2, 1\}}"),
        ("x^2+2x+1", r"\boxed{(x+1)^2}"),
        ("50\\%", r"\boxed{0.5}"),
        (r"\pi", r"\boxed{\pi}"),
        ("10", r"so we get $\boxed{10}$"),
    ],
)
def test_equivalent_forms_are_equal(mv, reference, answer):
    v = mv.verify(answer, math_problem(reference))
    assert v.correct, v.reason
    assert v.verifier == "math" and v.details["expected"] == reference


@pytest.mark.parametrize(
    ("reference", "answer"),
    [
        (r"\frac{1}{2}", "0.6"),
        (r"\frac{1}{2}", r"\boxed{2}"),
        ("(3, -1)", r"\boxed{(-1, 3)}"),
        (r"\sqrt{2}", r"\boxed{2}"),
        ("10", "I am not sure."),
        ("10", ""),
    ],
)
def test_wrong_answers_fail(mv, reference, answer):
    v = mv.verify(answer, math_problem(reference))
    assert not v.correct
    assert v.reason


def test_wrong_math500_answers_fail(mv):
    rows = [r for r in math500() if r["answer"].isdigit()][:10]
    for r in rows:
        wrong = str(int(r["answer"]) + 1)
        v = mv.verify(f"The answer is $\\boxed{{{wrong}}}$.", math_problem(r["answer"]))
        assert not v.correct, (r["answer"], wrong)
        assert v.details["extracted"] == wrong


def test_reason_and_details_show_what_was_compared(mv):
    v = mv.verify(r"We find $x = \boxed{0.5}$.", math_problem(r"\frac{1}{2}"))
    assert v.correct
    assert "equivalent to expected \\frac{1}{2}" in v.reason
    assert v.details["extracted"] is not None and v.details["parsed_expected"]


def test_a_hanging_comparison_times_out_into_a_failed_verdict_and_the_pool_recovers():
    pool = MathWorkerPool(size=1)
    try:
        mv = MathVerifier(timeout_s=1.0, pool=pool)
        v = mv.verify(r"\boxed{9^{9^{9^{9^{9}}}}}", math_problem("3"))
        assert not v.correct
        assert v.reason.startswith("timeout after 1s") and v.details["timed_out"]
        # the killed worker is replaced on the next call
        assert mv.verify(r"\boxed{3}", math_problem("3")).correct
    finally:
        pool.close()


def test_works_from_non_main_threads(mv):
    results: list[bool] = []

    def run() -> None:
        results.append(mv.verify("0.5", math_problem(r"\frac{1}{2}")).correct)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert results == [True] * 4


def test_missing_reference_is_a_verifier_error(mv):
    with pytest.raises(VerifierError):
        mv.verify("1", Problem(question="q", kind="math"))


def test_verdict_is_json_serialisable(mv):
    import json

    v = mv.verify(r"\boxed{\frac{2}{4}}", math_problem("0.5"))
    assert json.loads(json.dumps(v.as_dict()))["correct"] is True
