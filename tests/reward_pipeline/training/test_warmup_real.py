"""The warm-up on SmolLM2-135M: verified calculator plans become the plans the Conductor writes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor.config.pool import load_pool
from conductor.domain.prompts import build_plan_messages
from reward_pipeline.training.logprobs import pad_batch, token_logprobs
from reward_pipeline.training.policy import LoraSpec, load_trainable
from reward_pipeline.training.problems import arithmetic
from reward_pipeline.training.warmup import WarmupConfig, build_examples, calculator_plan, run_warmup
from tests.conftest import MODEL_HOME

pytestmark = pytest.mark.slow
BASE = MODEL_HOME / "models" / "smollm2-135m-instruct"
POOL = load_pool()


def _plan_logprob(model, tokenizer, question: str, plan: str) -> float:
    """Mean logprob per token of `plan` as the Conductor's reply to `question`."""
    import torch

    messages = build_plan_messages(question, POOL.cards(), max_steps=3, style="compact")
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    completion = tokenizer(plan, add_special_tokens=False)["input_ids"]
    ids, attn, _, plens = pad_batch([prompt], [completion], pad_id=0)
    with torch.no_grad():
        lp = token_logprobs(model, ids, attn, torch.tensor([1.0]))
    return float(lp[0, plens[0] :].mean())


def test_a_warmup_on_verified_calculator_plans_makes_them_likelier_on_questions_it_never_saw(tmp_path):
    from transformers import AutoTokenizer

    train = arithmetic(16, seed=5)
    examples = build_examples(train, POOL.cards(), n=16, max_steps=3, seed=0, verified_share=1.0)
    config = WarmupConfig(examples=16, epochs=2, batch_size=8, learning_rate=2e-3)
    metrics = run_warmup(examples, base_model=BASE, out_dir=tmp_path / "adapter", config=config)
    unseen = [p for p in arithmetic(40, seed=77) if p.question not in {t.question for t in train}][:4]
    tokenizer = AutoTokenizer.from_pretrained(BASE)

    def summed_logprob(adapter):
        model = load_trainable(BASE, adapter, LoraSpec()).eval()
        plans = [calculator_plan(p, POOL.cards()) for p in unseen]
        # (each question's mean logprob per token, summed over the questions)
        return sum(
            _plan_logprob(model, tokenizer, p.question, plan.to_python())
            for p, plan in zip(unseen, plans, strict=True)
            if plan
        )

    before, after = summed_logprob(None), summed_logprob(tmp_path / "adapter")

    assert metrics["steps"] == 4 and metrics["examples"] == 16
    # A fresh LoRA is the base model; after four steps the verified plans of new questions are far likelier.
    assert after > before + 1.0, (before, after)
    # TRL's TensorBoard logging, beside the adapter: the run's loss as the metrics report it.
    from tests.reward_pipeline.training.test_health import read_board

    board = read_board(tmp_path / "adapter" / "tensorboard")
    assert board["train/train_loss"] == [(4, pytest.approx(metrics["train_loss"], rel=1e-5))]


def test_the_route_warmup_trains_the_routes_that_earned_reward_and_records_its_trials(tmp_path):
    """The mixed warm-up end to end on the real model: route trials (SmolLM2 answering as the pool's
    workers, the tools in their sandbox), examples from the routes that earned reward, SFT, a registered
    candidate; the python plan of a letter count the trials rewarded becomes likelier."""
    from transformers import AutoTokenizer

    from conductor.domain.tools import run_tool
    from conductor.domain.workflow import Workflow
    from conductor.runtime import Runtime
    from conductor.sandbox import run_tool_program
    from reward_pipeline.training.batch_answers import BatchAnswerer
    from reward_pipeline.training.checkpoints import Registry
    from reward_pipeline.training.curriculum import mixed_problems
    from reward_pipeline.training.loops.stages import route_warmup_stage
    from tests.support.system import make_settings

    problems = mixed_problems(2, seed=21)
    # Short answers keep the trials quick; the models are still the pool's, at their own temperatures.
    pool = POOL.model_copy(
        update={"workers": [w if w.is_tool else w.model_copy(update={"max_tokens": 24}) for w in POOL.workers]}
    )
    registry = Registry(Runtime(make_settings(tmp_path)).sessions)
    released: list[int] = []
    view = route_warmup_stage(
        registry=registry,
        pool=pool,
        problems=problems,
        base_model=BASE,
        home=tmp_path,
        config=WarmupConfig(examples=16, epochs=2, batch_size=8, learning_rate=2e-3),
        answer=BatchAnswerer(BASE, batch_size=8),
        tool=lambda model, messages: run_tool(model, messages, execute=run_tool_program),
        max_steps=3,
        replan_share=0.25,
        log=lambda event: None,
        # what served the trials is let go once, before training (it counts the trials run by then)
        release=lambda: released.append(len(list(tmp_path.glob("checkpoints/*/route_trials.jsonl")))),
    )

    assert released == [0]
    assert view.status == "candidate" and view.config["curriculum"] == "mixed"
    stats = view.metrics["route_trials"]
    assert stats["problems"] == 12 and stats["solved_by_some_route"] >= 6  # every program route is right
    trials = (tmp_path / "checkpoints" / view.id / "route_trials.jsonl").read_text().splitlines()
    # two models and two tools handed the question on each of 12 problems, plus 8 programs and 2 expressions
    assert len(trials) == 2 * 12 + 2 * 12 + 8 + 2
    letters = next(p for p in problems if p.metadata["family"] == "letters")
    python = [w.name for w in pool.workers].index("python")
    plan = Workflow.from_lists([python], [letters.metadata["program"]], [[]]).to_python()
    tokenizer = AutoTokenizer.from_pretrained(BASE)
    before = _plan_logprob(load_trainable(BASE, None, LoraSpec()).eval(), tokenizer, letters.question, plan)
    after = _plan_logprob(
        load_trainable(BASE, Path(view.path or ""), LoraSpec()).eval(), tokenizer, letters.question, plan
    )
    assert after > before + 0.5, (before, after)
