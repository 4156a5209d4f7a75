"""How route_probs counts a subtasks-first plan: its first step goes to a tool when its subtask is not the
question, or when it is and the id written after it is a tool's."""

from __future__ import annotations

import pytest

from benchmarks.route_probs import summarise_question_first
from conductor.domain.prompts import WorkerCard

CARDS = [WorkerCard("model", "a model"), WorkerCard("python", "a tool", is_tool=True)]


def row(question_first_at_t: float, ids: list[float]) -> dict:
    return {
        "question_first": question_first_at_t,
        "question_first_at_t": question_first_at_t,
        "ids_given_question": ids,
    }


def test_code_first_is_a_tool_plan_and_the_question_given_to_a_model_is_not():
    assert summarise_question_first(CARDS, [row(0.0, [0.9, 0.1])], 0.3)["expected_to_tools"] == pytest.approx(1.0)
    assert summarise_question_first(CARDS, [row(1.0, [1.0, 0.0])], 0.3)["expected_to_tools"] == pytest.approx(0.0)


def test_the_question_handed_to_a_tool_counts_as_a_tool_plan_at_the_sampling_temperature():
    # ids 0.6 / 0.4 sharpened at 0.3: 0.4 ** (1 / 0.3) / (0.6 ** (1 / 0.3) + 0.4 ** (1 / 0.3)) ~ 0.209
    summary = summarise_question_first(CARDS, [row(1.0, [0.6, 0.4]), row(0.5, [0.6, 0.4])], 0.3)

    tool = 0.4 ** (1 / 0.3) / (0.6 ** (1 / 0.3) + 0.4 ** (1 / 0.3))
    assert summary["expected_to_tools"] == pytest.approx(tool + (1 - 0.5 * (1 - tool)))
    assert summary["question_first"] == pytest.approx(0.75) and summary["python"] == pytest.approx(0.4)
