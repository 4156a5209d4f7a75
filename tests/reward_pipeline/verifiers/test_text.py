"""The short-answer verifier: SQuAD's normalised exact match against the answer and its aliases, with
a short sentence that names the answer counted as the answer."""

from __future__ import annotations

import pytest

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers import JudgeVerifier, TextVerifier, verifier_for
from reward_pipeline.verifiers.text import normalize_answer

CAPITAL = Problem(question="What is the capital of France?", kind="text", answer="Paris")
PRESIDENT = Problem(
    question="Who was the first US president?",
    kind="text",
    answer="George Washington",
    metadata={"aliases": ["Washington", "President Washington"]},
)


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("The Eiffel Tower.", "eiffel tower"),
        ("  An   APPLE, a day!  ", "apple day"),
        ('Theodore\'s "theme"', "theodores theme"),  # articles go only as whole words
        ("Rock ’n’ roll — live", "rock n roll live"),
    ],
)
def test_normalisation_is_squads(text, normal):
    assert normalize_answer(text) == normal


@pytest.mark.parametrize(
    "answer",
    [
        "Paris",
        "paris.",
        "The answer is Paris.",
        "Answer: **Paris**",
        "France's capital is a big city.\nParis",
        "It is Paris, of course.",
        r"\boxed{Paris}",
    ],
)
def test_the_reference_in_any_usual_answer_shape_is_right(answer):
    verdict = TextVerifier().verify(answer, CAPITAL)
    assert verdict.correct, verdict
    assert verdict.verifier == "text"


@pytest.mark.parametrize("answer", ["Washington", "president washington", "It was George Washington."])
def test_aliases_count_as_the_answer(answer):
    assert TextVerifier().verify(answer, PRESIDENT).correct


@pytest.mark.parametrize(
    "answer",
    [
        "Lyon",
        "Parisian",  # a longer word is not the reference
        "The answer is Lyon.",
        # a long response that names it among other cities is a list, not an answer
        "France has many large cities such as Lyon, Marseille, Toulouse, Nice and Paris among others.",
        "No Python code found: give the python tool an expression or a short program, or a ```python block.",
    ],
)
def test_a_wrong_or_unanswering_response_is_wrong(answer):
    verdict = TextVerifier().verify(answer, CAPITAL)
    assert not verdict.correct, verdict


def test_a_problem_without_a_reference_cannot_be_verified():
    with pytest.raises(VerifierError):
        TextVerifier().verify("Paris", Problem(question="q", kind="text"))


def test_aliases_must_be_a_list_of_strings():
    with pytest.raises(VerifierError, match="aliases"):
        TextVerifier().verify(
            "Paris", Problem(question="q", kind="text", answer="Paris", metadata={"aliases": "Paname"})
        )


def test_text_problems_with_a_reference_are_routed_to_it_without_a_judge():
    assert isinstance(verifier_for(CAPITAL), TextVerifier)
    judge = JudgeVerifier(lambda _messages: "10")
    assert isinstance(verifier_for(CAPITAL, judge=judge), TextVerifier), "a reference needs no judge"
    with_rubric = CAPITAL.model_copy(update={"rubric": "Full marks for Paris."})
    assert verifier_for(with_rubric, judge=judge) is judge, "a rubric is what a judge is for"
    assert isinstance(verifier_for(with_rubric), TextVerifier)


def test_a_reference_that_is_an_article_keeps_its_articles() -> None:
    # "a" is the first letter of "apple": the article is the answer, not noise around it.
    p = Problem(question="What is the first letter of 'apple'?", answer="a", kind="text")
    v = TextVerifier()
    assert v.verify("A", p).correct and v.verify("The first letter is a.", p).correct
    assert not v.verify("b", p).correct and not v.verify("The first letter of apple is b.", p).correct
