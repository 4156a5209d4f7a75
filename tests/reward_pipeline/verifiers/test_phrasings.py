"""Answers as workers write them: every verifier accepts >= 97% of the right answers and <= 3%
of the wrong ones in the labelled phrasing set (`phrasings/*.jsonl`: hand-labelled outputs of
the local worker pool on GSM8K, MATH-500 and MMLU, and realistic phrasings over real problems:
undelimited LaTeX, ``\\dfrac``, ``a/b``, ``$1,234``, option texts, restated question numbers)."""

from __future__ import annotations

import pytest

from benchmarks.verifiers import PHRASING_KINDS, load_phrasings, phrasing_scores


@pytest.mark.parametrize("kind", PHRASING_KINDS)
def test_the_phrasing_set_is_labelled_and_holds_real_worker_outputs(kind):
    rows = load_phrasings(kind)
    assert len(rows) >= 80
    assert {type(r["expected"]) for r in rows} == {bool}
    assert sum(r["expected"] for r in rows) >= 40 and sum(not r["expected"] for r in rows) >= 40
    assert any(not r["source"].startswith("crafted") for r in rows), "no real worker output in the set"
    if kind == "mc":
        assert all(r.get("choices") for r in rows)


@pytest.mark.parametrize("kind", PHRASING_KINDS)
def test_verifier_accepts_right_answers_and_rejects_wrong_ones(kind):
    scores = phrasing_scores(kind)
    missed = "\n".join(f"{m['text']!r} ref={m['reference']}: {m['reason']}" for m in scores["misses"])
    assert scores["recall"] >= 0.97, f"{kind}: right answers accepted {scores['recall']:.1%}\n{missed}"
    assert scores["false_accept"] <= 0.03, f"{kind}: wrong answers accepted {scores['false_accept']:.1%}\n{missed}"


@pytest.mark.parametrize(
    ("kind", "text", "reference", "choices", "correct"),
    [
        ("math", "the answer is \\dfrac{7}{4}.", "\\frac{7}{4}", None, True),
        ("math", "We know $x + y = 5$, so the answer is \\tfrac{3}{2}.", "\\frac32", None, True),
        ("number", "She pays $1,234 in total.", "1234", None, True),
        ("number", "So she makes 9 * 2 = $18 a day from her 16 eggs.", "18", None, True),
        ("mc", "the answer is: A = cyclohexanecarbaldehyde, B = TsOH", "C",
         ["A = vinylcyclohexane, B = Acetic acid", "A = vinylcyclohexane, B = TsOH",
          "A = cyclohexanecarbaldehyde, B = TsOH", "A = cyclohexanecarbaldehyde, B = Acetic acid"], True),
        ("mc", "the answer is: A = cyclohexanecarbaldehyde, B = TsOH", "A",
         ["A = vinylcyclohexane, B = Acetic acid", "A = vinylcyclohexane, B = TsOH",
          "A = cyclohexanecarbaldehyde, B = TsOH", "A = cyclohexanecarbaldehyde, B = Acetic acid"], False),
    ],
)  # fmt: skip
def test_the_cases_named_in_the_issue(kind, text, reference, choices, correct):
    from benchmarks.verifiers import phrasing_problem
    from reward_pipeline.verifiers import MathVerifier, MultipleChoiceVerifier, NumberVerifier

    verifier = {"number": NumberVerifier, "math": MathVerifier, "mc": MultipleChoiceVerifier}[kind]()
    row = {"reference": reference, "choices": choices, "question": "Janet's ducks lay 16 eggs per day."}
    assert verifier.verify(text, phrasing_problem(kind, row)).correct is correct
