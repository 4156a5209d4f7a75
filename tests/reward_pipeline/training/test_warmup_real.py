"""The warm-up on SmolLM2-135M: verified calculator plans become the plans the Conductor writes."""

from __future__ import annotations

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
            _plan_logprob(model, tokenizer, p.question, plan[0]) for p, plan in zip(unseen, plans, strict=True) if plan
        )

    before, after = summed_logprob(None), summed_logprob(tmp_path / "adapter")

    assert metrics["steps"] == 4 and metrics["examples"] == 16
    # A fresh LoRA is the base model; after four steps the verified plans of new questions are far likelier.
    assert after > before + 1.0, (before, after)
    # TRL's TensorBoard logging, beside the adapter: the run's loss as the metrics report it.
    from tests.reward_pipeline.training.test_health import read_board

    board = read_board(tmp_path / "adapter" / "tensorboard")
    assert board["train/train_loss"] == [(4, pytest.approx(metrics["train_loss"], rel=1e-5))]
