"""The multiple-choice verifier reads the letter a reply finally commits to, from many phrasings,
and falls back to the text of a choice when no letter is given."""

from __future__ import annotations

import random

import pytest

from conductor.domain.errors import VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.mc import MultipleChoiceVerifier, extract_choice, reference_letter
from tests.reward_pipeline._data import mmlu, mmlu_problem

MC = MultipleChoiceVerifier()
CAPITALS = ["London", "Paris", "Berlin", "Madrid"]


@pytest.mark.parametrize(
    ("reply", "letter"),
    [
        ("The answer is (B)", "B"),
        ("B", "B"),
        ("b.", "B"),
        ("(c)", "C"),
        ("**C**", "C"),
        ("Answer: d", "D"),
        ("answer: a", "A"),
        ("I think the correct option is B) Paris", "B"),
        ("(A) ... wait, actually C", "C"),
        ("The answer is (A). Hmm, on second thought, D.", "D"),
        ("Final Answer: \\boxed{D}", "D"),
        ("$\\boxed{\\text{C}}$", "C"),
        ("The correct answer is **B. Paris**", "B"),
        ("**Answer:** C", "C"),
        ("Option C is correct.", "C"),
        ("I would choose option A.", "A"),
        ("Answer: (A) London", "A"),
        ("The answer is B, not A.", "B"),
        ("Correct answer: (b)", "B"),
        ("The best answer is D.", "D"),
        ("Let's check each. (A) is wrong. (D) is wrong too. The answer is C. (B) is not correct either.", "C"),
        ("The answer is a bit tricky, but I'll go with B.", "B"),
        ("A cat sat on the mat, so I think B", "B"),
        ("Reasoning...\nB) Paris\n", "B"),
        ("Paris", "B"),
        ("I believe it's Berlin.", "C"),
        ("The capital is Paris, so the answer is Paris.", "B"),
        ("After considering everything, Madrid.", "D"),
    ],
)
def test_letter_extraction_from_varied_phrasings(reply, letter):
    found = extract_choice(reply, CAPITALS)
    assert found is not None, reply
    assert found[0] == letter, (reply, found)


@pytest.mark.parametrize("reply", ["", "I don't know.", "none of these look right to me"])
def test_no_choice_found(reply):
    assert extract_choice(reply, CAPITALS) is None


def test_letters_beyond_the_number_of_choices_are_ignored():
    assert extract_choice("The answer is E. No wait, the answer is B.", CAPITALS) == ("B", "answer phrase")
    assert extract_choice("E", ["1", "2", "3", "4", "5"])[0] == "E"


PHRASINGS = [
    "{L}",
    "The answer is ({L}).",
    "Answer: {l}",
    "**{L}**",
    "After careful thought, the correct option is {L}) {T}",
    "I'd go with {L}.",
    "(A) seems plausible... wait, actually {L}",
    "\\boxed{{{L}}}",
    "{T}",
]


def test_mmlu_sample_in_every_phrasing_is_correct_and_a_wrong_letter_is_not():
    rng = random.Random(0)
    rows = rng.sample(mmlu(), 60)
    for row in rows:
        p = mmlu_problem(row)
        letter = row["correct_answer"]
        text = row[f"answer_{letter.lower()}"]
        if sum(c.strip().lower() == text.strip().lower() for c in p.choices) > 1:
            continue
        for tpl in PHRASINGS:
            if "{T}" in tpl and any(text.lower() in c.lower() and c != text for c in p.choices):
                continue  # the text is part of another choice: a text-only reply is ambiguous
            reply = tpl.format(L=letter, l=letter.lower(), T=text)
            v = MC.verify(reply, p)
            assert v.correct, (reply, v.reason)
        wrong = "ABCD"[("ABCD".index(letter) + 1) % 4]
        v = MC.verify(f"The answer is ({wrong}).", p)
        assert not v.correct and v.details["extracted"] == wrong


def test_verdict_evidence():
    p = Problem(question="Capital of France?", kind="mc", choices=CAPITALS, answer="B")
    v = MC.verify("I'd say **B**", p)
    assert v.correct and v.verifier == "mc"
    assert v.details["extracted"] == "B" and v.details["expected"] == "B"
    assert v.details["extracted_text"] == "Paris"
    assert "chose B" in v.reason


def test_reference_can_be_a_letter_or_the_choice_text():
    assert reference_letter(Problem(question="q", kind="mc", choices=CAPITALS, answer="(c)")) == "C"
    assert reference_letter(Problem(question="q", kind="mc", choices=CAPITALS, answer="Madrid")) == "D"
    with pytest.raises(VerifierError):
        reference_letter(Problem(question="q", kind="mc", choices=CAPITALS, answer="Rome"))


def test_a_reply_that_is_exactly_a_choice_text_means_that_choice_even_with_letters_inside():
    choices = ["(A) only", "(B) only", "(A) and (C)", "none of them"]
    assert extract_choice("(A) and (C)", choices) == ("C", "choice text")
    assert extract_choice("None of them.", choices) == ("D", "choice text")
