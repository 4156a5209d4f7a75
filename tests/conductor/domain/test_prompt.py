"""Specification of the prompts: what the Conductor and the workers are shown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conductor.domain.parser import parse_workflow
from conductor.domain.prompts import (
    MAX_PREVIOUS_ANSWER_CHARS,
    WorkerCard,
    build_plan_messages,
    build_replan_messages,
    build_step_messages,
    few_shot_examples,
)
from conductor.domain.workflow import Workflow

POOL = [
    WorkerCard("smol", "SmolLM2-135M-Instruct: tiny and fast, for easy questions."),
    WorkerCard("math", "Qwen2.5-Math-7B: careful step-by-step math."),
    WorkerCard("coder", "Qwen2.5-Coder-7B: writes and reviews Python code."),
]
QUESTION = "What is the smallest prime greater than 100?"
BLOCK = re.compile(r"^```python\n(.*?)\n```$", re.DOTALL | re.MULTILINE)
MODEL_DIR = Path(__file__).resolve().parents[3] / ".conductor" / "models" / "smollm2-135m-instruct"


def user_text(messages: list[dict]) -> str:
    assert [m["role"] for m in messages] == ["system", "user"]
    assert all(isinstance(m["content"], str) and m["content"] for m in messages)
    return messages[1]["content"]


def test_pool_is_numbered_in_order_with_descriptions():
    text = user_text(build_plan_messages(QUESTION, POOL))
    expected = "\n".join(f"Model {i}: {w.description}" for i, w in enumerate(POOL))
    assert expected in text
    assert "Model 3" not in text


def test_pool_descriptions_are_one_line_each():
    pool = [WorkerCard("a", "first line\nsecond   line"), WorkerCard("b", "")]
    text = user_text(build_plan_messages(QUESTION, pool))
    assert "Model 0: first line second line\nModel 1: b\n" in text


def test_plan_prompt_explains_the_format_and_ends_with_the_question():
    text = user_text(build_plan_messages(QUESTION, POOL, max_steps=4))
    for needle in ("model_id", "subtasks", "access_list", '"all"', "[]", "[0, 2]", "parallel", "1 to 4 steps"):
        assert needle in text
    assert f"Question: {QUESTION}" in text
    assert text.rindex(f"Question: {QUESTION}") > text.rindex("```")
    assert "ONE fenced python code block" in text


@pytest.mark.parametrize("pool_size", [1, 2, 3, 4, 7])
def test_four_few_shots_each_parse_against_the_pool(pool_size):
    pool = [WorkerCard(f"w{i}", f"worker {i}") for i in range(pool_size)]
    text = user_text(build_plan_messages(QUESTION, pool))
    bodies = BLOCK.findall(text)
    assert len(bodies) == 4
    workflows = [parse_workflow(f"```python\n{b}\n```", pool_size=pool_size) for b in bodies]
    assert [wf for _, wf in few_shot_examples(pool_size)] == workflows
    lengths = [len(wf.steps) for wf in workflows]
    accesses = [s.access for wf in workflows for s in wf.steps]
    # the four shapes: one easy step, a solve+verify chain, a plan/implement/verify chain, a fan-out
    assert lengths[0] == 1 and 2 <= lengths[1] <= 3 and all(n >= 3 for n in lengths[2:])
    assert all(s.access == "all" for s in workflows[2].steps[1:])
    fan_out = workflows[3]
    assert fan_out.roots() == tuple(range(len(fan_out.steps) - 1))
    assert fan_out.steps[-1].access == tuple(range(len(fan_out.steps) - 1))
    assert "all" in accesses and () in accesses


def test_few_shots_respect_a_small_step_cap():
    text = user_text(build_plan_messages(QUESTION, POOL, max_steps=2))
    bodies = BLOCK.findall(text)
    assert 1 <= len(bodies) < 4
    for b in bodies:
        parse_workflow(f"```python\n{b}\n```", pool_size=3, max_steps=2)


def test_empty_pool_and_bad_step_cap_rejected():
    with pytest.raises(ValueError):
        build_plan_messages(QUESTION, [])
    with pytest.raises(ValueError):
        build_plan_messages(QUESTION, POOL, max_steps=0)


def test_replan_prompt_shows_previous_workflow_and_answer():
    previous = Workflow.from_lists([1, 2], ["Solve it.", "Check it."], [[], "all"])
    answer = "The answer is \\boxed{101}."
    text = user_text(build_replan_messages(QUESTION, POOL, previous=previous, previous_answer=answer))
    assert previous.to_python() in text
    assert answer in text
    assert f"Question: {QUESTION}" in text
    assert "Model 2: " + POOL[2].description in text
    assert "model_id = [], subtasks = [], access_list = []" in text
    assert "previous final answer" in text
    assert text.index(previous.to_python()) < text.index(answer)
    # the only block in the prompt is the previous workflow, and it parses back
    assert [parse_workflow(f"```python\n{b}\n```", pool_size=3) for b in BLOCK.findall(text)] == [previous]


@pytest.mark.parametrize("style", ["compact", "full"])
def test_a_conductor_served_subtasks_first_is_asked_for_the_lists_in_that_order(style):
    previous = Workflow.from_lists([1], ["{question}"], [[]])
    plan = user_text(build_plan_messages(QUESTION, POOL, style=style, order="subtasks-first"))
    replan = user_text(
        build_replan_messages(
            QUESTION, POOL, previous=previous, previous_answer="7", style=style, order="subtasks-first"
        )
    )

    assert "defining subtasks, model_id and access_list" in plan or "defines subtasks, model_id and access_list" in plan
    assert previous.to_python("subtasks-first") in replan and previous.to_python() not in replan
    # every block a prompt shows is written the way the Conductor is asked to write its own
    assert all(b.startswith("subtasks = ") for b in BLOCK.findall(plan + replan))
    assert "model_id, subtasks" not in plan + replan


def test_replan_clips_a_huge_previous_answer_keeping_both_ends():
    previous = Workflow.from_lists([0], ["x"], [[]])
    answer = "START " + "blah " * 10_000 + " \\boxed{7}"
    text = user_text(build_replan_messages(QUESTION, POOL, previous=previous, previous_answer=answer))
    assert "START" in text and "\\boxed{7}" in text and "omitted" in text
    assert len(text) < MAX_PREVIOUS_ANSWER_CHARS + 4_000


def test_step_messages_put_context_first_then_the_subtask():
    messages = build_step_messages("Check the solution.", [("Plan it.", "The plan."), ("Solve it.", "42")])
    assert messages == [
        {"role": "user", "content": "Plan it."},
        {"role": "assistant", "content": "The plan."},
        {"role": "user", "content": "Solve it."},
        {"role": "assistant", "content": "42"},
        {"role": "user", "content": "Check the solution."},
    ]
    assert build_step_messages("Only this.", []) == [{"role": "user", "content": "Only this."}]


@pytest.mark.skipif(not (MODEL_DIR / "tokenizer_config.json").exists(), reason="local model not pulled")
def test_plan_prompt_fits_the_small_conductor():
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(str(MODEL_DIR))
    question = "Janet's ducks lay 16 eggs per day. She eats three for breakfast and bakes muffins with four. " * 2
    ids = tok.apply_chat_template(build_plan_messages(question, POOL), add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    assert len(ids) < 1_500
