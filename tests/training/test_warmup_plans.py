"""The format warm-up's synthetic plans: every shape is a workflow the production parser accepts,
multi-step shapes are a real share of them, and no plan writes the question twice."""

from __future__ import annotations

import random
from collections import Counter

from conductor.domain.parser import parse_workflow
from conductor.domain.problem import Problem
from conductor.domain.prompts import WorkerCard
from reward_pipeline.training.warmup import build_examples, synthetic_plan

QUESTION = 'Tom has 3 "red" apples and buys 4 more. How many apples does he have now?'


def test_every_synthetic_plan_round_trips_through_the_parser_and_names_the_question_once():
    rng = random.Random(7)
    sizes: Counter[int] = Counter()
    for _ in range(200):
        text, expected = synthetic_plan(QUESTION, 2, rng)
        assert parse_workflow(text, pool_size=2, max_steps=5) == expected
        assert sum(QUESTION in step.subtask for step in expected.steps) == 1
        sizes[len(expected.steps)] += 1
    assert set(sizes) == {1, 2, 3}
    assert sizes[1] < 100, "most warm-up plans must have several steps, or GRPO never sees a workflow"


def test_warmup_examples_are_prompt_completion_pairs_on_the_compact_prompt():
    workers = [WorkerCard(name="a", description="fast"), WorkerCard(name="b", description="careful")]
    problems = [Problem(id=f"p{i}", question=f"What is {i} + 2?", answer=str(i + 2), kind="math") for i in range(5)]
    examples = build_examples(problems, workers, n=12, max_steps=5, seed=0)
    assert len(examples) == 12
    assert all(e["completion"][0]["content"].startswith("```python") for e in examples)
    assert all("Model 1: careful" in e["prompt"][-1]["content"] for e in examples)
