"""The calculator worker computes exactly what it is shown and never executes anything but arithmetic."""

from __future__ import annotations

import pytest

from conductor.domain.calculator import NO_EXPRESSION, calculate, find_expressions, uses_numbers_of
from conductor.domain.prompts import build_step_messages
from conductor.domain.tools import run_tool


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("23 + 17", "40"),
        ("The answer is 7 x 34.", "238"),
        ("7 × 34", "238"),
        ("1,200 * 3", "3600"),
        ("(48 / 2) + 48 = 72", "72"),
        ("compute (3+4)*2 please", "14"),
        ("-5 + 3", "-2"),
        ("10 / 4", "2.5"),
        ("1 / 3", "0.333333"),
        ("12 ÷ 3", "4"),
    ],
)
def test_it_evaluates_the_expression_in_a_models_prose(text, expected):
    assert calculate([text]).text == expected


def test_the_last_expression_of_a_worked_solution_is_the_one_computed():
    assert calculate(["Step 1: 48 / 2 = 24. Step 2: 24 + 48"]).text == "72"


def test_numbers_without_an_operator_are_not_an_expression():
    assert find_expressions("Tom has 23 apples and buys 17 more.") == []
    assert calculate(["Tom has 23 apples and buys 17 more."]).text == NO_EXPRESSION


@pytest.mark.parametrize(
    "hostile",
    [
        "2 ** 100000",
        "__import__('os').system('true') + 1",
        "9" * 300 + " + 1",
        "99999999 * 99999999 * 99999999",
        "(" * 500 + "1 + 1" + ")" * 500,
    ],
)
def test_nothing_but_bounded_arithmetic_is_evaluated(hostile):
    result = calculate([hostile])
    assert result.value is None or abs(result.value) <= 1e15


def test_division_by_zero_is_an_answer_not_a_crash():
    assert "division by zero" in calculate(["10 / 0"]).text


def test_earlier_texts_take_priority_over_later_ones():
    assert calculate(["nothing here", "2 + 2", "3 + 3"]).text == "4"


def test_as_a_worker_it_computes_what_the_step_before_it_wrote():
    messages = build_step_messages(
        "Compute the expression above.",
        [("Write the expression for: Tom has 23 apples and buys 17 more.", "23 + 17")],
    )
    assert run_tool("tool/calculator", messages) == "40"


def test_as_a_worker_alone_it_computes_its_subtask():
    assert run_tool("tool/calculator", build_step_messages("What is 7 * 34?", [])) == "238"


def test_of_several_earlier_steps_the_latest_response_counts():
    messages = build_step_messages("Compute it.", [("first", "1 + 1"), ("second", "5 * 5")])
    assert run_tool("tool/calculator", messages) == "25"


def test_an_unknown_tool_is_refused():
    with pytest.raises(ValueError, match="unknown tool"):
        run_tool("tool/abacus", [])


def test_finding_nothing_answers_without_a_number_a_verifier_could_mistake_for_a_result():
    assert not any(ch.isdigit() for ch in NO_EXPRESSION)


@pytest.mark.parametrize(
    ("text", "question", "grounded"),
    [
        ("12 * 3 + 4", "Which planet is the largest?", False),
        ("2020 - 2", "What happened in 2020 in the US?", True),
        ("48 + 48 / 2", "Natalia sold clips to 48 of her friends, then half as many in May.", True),
        ("1200 * 2", "A bike costs $1,200. What do two cost?", True),
        ("0.5 * 10", "Half of 10 is what?", True),
        ("Which planet?", "Which planet is the largest?", True),  # nothing to evaluate: NO_EXPRESSION's case
    ],
)
def test_an_expression_is_grounded_when_one_of_its_numbers_is_written_in_the_question(text, question, grounded):
    assert uses_numbers_of(text, question) is grounded
