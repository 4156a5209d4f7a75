"""The warm-up's synthetic plans: valid by the production parser, and never a nonsense assignment."""

from __future__ import annotations

from collections import Counter

from conductor.config.pool import load_pool
from conductor.domain.parser import parse_workflow
from conductor.domain.plan_grammar import PlanGrammar
from conductor.domain.problem import Problem
from conductor.domain.prompts import QUESTION_REF
from reward_pipeline.training.warmup import build_examples, calculator_plan

POOL = load_pool()  # the bundled local pool: two SmolLM2 workers, the calculator and the python tool
QUESTIONS = [
    Problem(question=f"Tom has {i} apples and buys 3 more. How many apples does he have now?") for i in range(40)
]


def _plans(n: int = 400):
    examples = build_examples(QUESTIONS, POOL.cards(), n=n, max_steps=5, seed=3)
    return [parse_workflow(e["completion"][0]["content"], pool_size=len(POOL.workers), max_steps=5) for e in examples]


def test_every_synthetic_plan_parses_and_most_have_several_steps():
    steps = Counter(len(p.steps) for p in _plans())
    assert sum(steps.values()) == 400
    assert steps[1] < 200 and steps[2] > 100


def test_plans_reference_the_question_and_never_copy_it():
    plans = _plans(100)

    assert all(any(QUESTION_REF in s.subtask for s in p.steps) for p in plans)
    assert not any("apples" in s.subtask for p in plans for s in p.steps)


def test_every_synthetic_plan_is_a_sentence_of_the_plan_grammar():
    grammar = PlanGrammar.for_round(
        len(POOL.workers), max_steps=5, max_tokens=256, prompt_style="compact", replan=False
    )
    examples = build_examples(QUESTIONS, POOL.cards(), n=100, max_steps=5, seed=3)

    assert all(grammar.matches(e["completion"][0]["content"]) for e in examples)


def test_an_expression_is_never_asked_of_the_calculator():
    calculator = [w.name for w in POOL.workers].index("calculator")
    expression_steps = [p.steps[0] for p in _plans() if "arithmetic expression" in p.steps[0].subtask]
    assert expression_steps, "the pool has a calculator, so the expression-then-compute shape is drawn"
    assert all(s.worker != calculator for s in expression_steps)


def test_which_worker_computes_is_left_to_grpo():
    computed_by = Counter(p.steps[1].worker for p in _plans() if "arithmetic expression" in p.steps[0].subtask)
    assert set(computed_by) == set(range(len(POOL.workers))), "every worker, the tools too"


def test_the_warmup_trains_in_float32_whatever_trl_defaults_to(tmp_path):
    # TRL's SFTConfig turns bf16 on by default; on a CPU without bf16 instructions that made a
    # warm-up step 20 times slower (torch's reference GEMM), and GRPO computes its ratios in fp32.
    from reward_pipeline.training.warmup import WarmupConfig, sft_args

    args = sft_args(WarmupConfig(), tmp_path)

    assert not args.bf16 and not args.fp16
    assert args.use_cpu and args.completion_only_loss


def _with_expression(question: str, answer: str, expression: str) -> Problem:
    return Problem(question=question, answer=answer, kind="math", metadata={"expression": expression})


def test_a_problem_with_a_verified_expression_is_taught_as_the_one_step_calculator_plan():
    calculator = [w.name for w in POOL.workers].index("calculator")
    problem = _with_expression("A shelf holds 6 rows of 9 books. How many books?", "54", "6 * 9")

    examples = build_examples([problem], POOL.cards(), n=20, max_steps=5, seed=1, verified_share=1.0)
    plans = [parse_workflow(e["completion"][0]["content"], pool_size=len(POOL.workers), max_steps=5) for e in examples]

    assert all(len(p.steps) == 1 and p.steps[0].worker == calculator for p in plans)
    assert {p.steps[0].subtask for p in plans} == {"6 * 9"}


def test_an_expression_the_calculator_does_not_turn_into_the_reference_is_never_taught():
    wrong = _with_expression("A shelf holds 6 rows of 9 books. How many books?", "54", "6 + 9")

    assert calculator_plan(wrong, POOL.cards()) is None
    examples = build_examples([wrong], POOL.cards(), n=30, max_steps=5, seed=1, verified_share=1.0)
    assert not any("6 + 9" in e["completion"][0]["content"] for e in examples)


def test_without_a_calculator_in_the_pool_there_is_no_calculator_plan():
    models_only = [c for c in POOL.cards() if not c.is_tool]

    assert calculator_plan(_with_expression("6 rows of 9?", "54", "6 * 9"), models_only) is None


def test_the_verified_share_leaves_other_routes_in_the_data_for_grpo_to_weigh():
    problems = [_with_expression(f"A shelf holds {i} rows of 9 books.", str(9 * i), f"{i} * 9") for i in range(2, 42)]

    examples = build_examples(problems, POOL.cards(), n=400, max_steps=5, seed=2, verified_share=0.75)
    direct = sum(QUESTION_REF not in e["completion"][0]["content"] for e in examples)

    assert 250 < direct < 350
    grammar = PlanGrammar.for_round(
        len(POOL.workers), max_steps=5, max_tokens=256, prompt_style="compact", replan=False
    )
    assert all(grammar.matches(e["completion"][0]["content"]) for e in examples)
