"""Real training steps on SmolLM2-135M (tiny config) and the trainer's logprobs against the backend's."""

from __future__ import annotations

import pytest

from conductor.domain.parser import parse_workflow
from conductor.domain.plan_grammar import PlanGrammar
from conductor.domain.prompts import WorkerCard, build_plan_messages
from conductor.inference.local_backend import LocalModel
from reward_pipeline.training.dataset import Row
from reward_pipeline.training.grpo import OfflineGRPOTrainer, make_config
from reward_pipeline.training.logprobs import grammar_masks, pad_batch, token_logprobs
from reward_pipeline.training.policy import LoraSpec, load_trainable
from tests.conftest import MODEL_HOME

pytestmark = pytest.mark.slow
BASE = MODEL_HOME / "models" / "smollm2-135m-instruct"
CARDS = [WorkerCard("a", "small fast model"), WorkerCard("b", "careful checker")]


@pytest.fixture(scope="module")
def backend() -> LocalModel:
    return LocalModel(str(BASE))


def _sample(backend: LocalModel, question: str, temperature: float, seed: int, max_tokens: int = 16):
    messages = build_plan_messages(question, CARDS, style="compact")
    return backend.generate(messages, max_tokens=max_tokens, temperature=temperature, seed=seed)


def _logprobs(model, gen, temperature: float) -> list[float]:
    import torch

    ids, attn, _, plens = pad_batch([gen.prompt_token_ids], [gen.token_ids], pad_id=0)
    with torch.no_grad():
        lp = token_logprobs(model, ids, attn, torch.tensor([temperature]))
    return lp[0, plens[0] : plens[0] + len(gen.token_ids)].tolist()


@pytest.mark.parametrize("temperature", [0.7])
def test_trainer_logprobs_of_a_stored_completion_match_what_the_backend_reported(backend, temperature):
    gen = _sample(backend, "What is 12 + 30?", temperature, seed=3)

    ours = _logprobs(backend.model, gen, temperature)

    assert len(ours) == len(gen.logprobs) > 5
    assert max(abs(a - b) for a, b in zip(ours, gen.logprobs, strict=True)) < 2e-3


def test_a_temperature_mismatch_is_visible_in_the_logprobs(backend):
    gen = _sample(backend, "What is 12 + 30?", 0.7, seed=3)

    wrong = _logprobs(backend.model, gen, 1.0)

    assert max(abs(a - b) for a, b in zip(wrong, gen.logprobs, strict=True)) > 0.05


def test_grpo_steps_raise_the_rewarded_completion_and_lower_the_unrewarded_one(backend, tmp_path):
    from transformers import AutoTokenizer

    good = _sample(backend, "What is 12 + 30?", 1.0, seed=1)
    bad = _sample(backend, "What is 12 + 30?", 1.0, seed=2)
    rows = [
        Row(i, "job", g.prompt_token_ids, g.token_ids, g.logprobs, 1.0, "base", 0, reward)
        for i, (g, reward) in enumerate([(good, 1.0), (bad, 0.0)])
    ]
    model = load_trainable(BASE, None, LoraSpec(r=8, top_layers=4))
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    lp_good, lp_bad = sum(_logprobs(model, good, 1.0)), sum(_logprobs(model, bad, 1.0))
    config = make_config(
        tmp_path, learning_rate=5e-3, per_device_train_batch_size=2, gradient_accumulation_steps=1, num_generations=2
    )
    trainer = OfflineGRPOTrainer(model, AutoTokenizer.from_pretrained(BASE), config, log=lambda _: None)

    summaries = [trainer.train([rows]) for _ in range(3)]

    changed = [n for n, p in model.named_parameters() if p.requires_grad and not p.detach().equal(before[n])]
    assert changed, "no trainable parameter changed"
    assert sum(_logprobs(model, good, 1.0)) > lp_good
    assert sum(_logprobs(model, bad, 1.0)) < lp_bad
    first = summaries[0]["steps"][0]
    # The first step is on-policy: weights and ratios are 1 (the LoRA starts as the identity).
    assert first["ratio_mean"] == pytest.approx(1.0) and first["importance_weight_mean"] == pytest.approx(1.0, abs=1e-3)


def test_a_group_with_no_reward_variance_is_dropped(backend, tmp_path):
    from transformers import AutoTokenizer

    gen = _sample(backend, "What is 2 + 2?", 1.0, seed=5, max_tokens=8)
    rows = [Row(i, "job", gen.prompt_token_ids, gen.token_ids, gen.logprobs, 1.0, "base", 0, 0.5) for i in range(2)]
    model = load_trainable(BASE, None, LoraSpec(r=4, top_layers=2))
    trainer = OfflineGRPOTrainer(model, AutoTokenizer.from_pretrained(BASE), make_config(tmp_path), log=lambda _: None)

    summary = trainer.train([rows])

    assert summary["groups_dropped_zero_variance"] == 1 and summary["rows_trained"] == 0 and summary["steps"] == []


# -- grammar on: the behaviour distribution is the masked one ---------------------------------------
PLAN = PlanGrammar.for_round(len(CARDS), max_steps=2, max_tokens=64, prompt_style="compact", replan=False)


def _masked_logprobs(model, tokenizer, gen, temperature: float, regex: str | None) -> list[float]:
    import torch

    from conductor.inference.grammar import masks_for

    ids, attn, _, plens = pad_batch([gen.prompt_token_ids], [gen.token_ids], pad_id=0)
    masks = masks_for(tokenizer, int(model.config.vocab_size))
    allowed = grammar_masks(masks, [regex], [gen.token_ids], plens, ids.shape[1]) if regex else None
    with torch.no_grad():
        lp = token_logprobs(model, ids, attn, torch.tensor([temperature]), allowed)
    return lp[0, plens[0] : plens[0] + len(gen.token_ids)].tolist()


def test_under_the_grammar_the_trainer_reproduces_the_masked_behaviour_logprobs(backend):
    messages = build_plan_messages("What is 12 + 30?", CARDS, max_steps=2, style="compact")
    gen = backend.generate(messages, max_tokens=64, temperature=0.7, seed=11, regex=PLAN.regex())

    masked = _masked_logprobs(backend.model, backend.tokenizer, gen, 0.7, PLAN.regex())
    unmasked = _masked_logprobs(backend.model, backend.tokenizer, gen, 0.7, None)

    assert gen.finish_reason == "stop" and parse_workflow(gen.text, pool_size=len(CARDS), max_steps=2)
    # On-policy: the importance ratio exp(current - behaviour) is 1 at every token.
    assert max(abs(a - b) for a, b in zip(masked, gen.logprobs, strict=True)) < 2e-3
    # Forced tokens (the fences, the list names) report exactly 0, as vLLM's processed logprobs do.
    assert sum(1 for lp in gen.logprobs if lp == 0.0) >= 5
    # Leaving the mask out is visible: the ratio would be taken against a distribution never sampled.
    assert max(abs(a - b) for a, b in zip(unmasked, gen.logprobs, strict=True)) > 0.5


def test_a_wrong_grammar_mask_is_visible_in_the_trainers_logprobs(backend):
    messages = build_plan_messages("What is 12 + 30?", CARDS, max_steps=2, style="compact")
    gen = backend.generate(messages, max_tokens=64, temperature=0.7, seed=11, regex=PLAN.regex())
    wrong = PlanGrammar.for_round(5, max_steps=3, max_tokens=64, prompt_style="compact", replan=False).regex()

    replayed = _masked_logprobs(backend.model, backend.tokenizer, gen, 0.7, wrong)

    assert max(abs(a - b) for a, b in zip(replayed, gen.logprobs, strict=True)) > 0.01


def test_grpo_on_grammar_rows_starts_on_policy(backend, tmp_path):
    from transformers import AutoTokenizer

    messages = build_plan_messages("What is 12 + 30?", CARDS, max_steps=2, style="compact")
    gens = [backend.generate(messages, max_tokens=64, temperature=1.0, seed=s, regex=PLAN.regex()) for s in (1, 2)]
    rows = [
        Row(i, "job", g.prompt_token_ids, g.token_ids, g.logprobs, 1.0, "base", 0, reward, grammar=PLAN.regex())
        for i, (g, reward) in enumerate(zip(gens, (1.0, 0.5), strict=True))
    ]
    model = load_trainable(BASE, None, LoraSpec(r=4, top_layers=2))
    config = make_config(tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=1, num_generations=2)
    trainer = OfflineGRPOTrainer(model, AutoTokenizer.from_pretrained(BASE), config, log=lambda _: None)

    first = trainer.train([rows])["steps"][0]

    assert first["ratio_mean"] == pytest.approx(1.0) and first["importance_weight_mean"] == pytest.approx(1.0, abs=1e-3)
