"""Promotion on a real vLLM CPU server: adapters loaded at run time under a name per version, the
fleet follows the store, rounds carry the version and the vLLM-served model name, rollback flips
back, a pinned gate candidate runs beside the active policy; and the trainer reproduces vLLM's
processed logprobs of a stored completion."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conductor.domain.problem import Problem
from conductor.inference.policy import lora_name
from conductor.inference.vllm_server import VllmServer, list_models
from conductor.store.models import Round
from reward_pipeline.training.checkpoints import Registry
from reward_pipeline.training.loops.cycle import pinned_eval
from reward_pipeline.training.loops.online import Policy
from reward_pipeline.training.policy import LoraSpec, load_trainable, save_adapter
from reward_pipeline.training.rollouts import Rollouts
from reward_pipeline.training.serving import VllmServing
from tests.support.system import System, embedded_system
from tests.vllm.conftest import SERVED
from tests.vllm.test_pipeline_on_vllm import vllm_pool

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def adapters(model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name in ("ck-a", "ck-b"):
        model = load_trainable(model_path, None, LoraSpec(r=8, top_layers=4))
        out[name] = save_adapter(model, None, tmp_path_factory.mktemp(name))
    return out


@pytest.fixture(scope="module")
def system(server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    home = tmp_path_factory.mktemp("home")
    with embedded_system(
        home, vllm_pool(server.base_url), concurrency=8, recursion=False, plan_retries=0, max_steps=3,
        policy_refresh_s=0.1,
    ) as sys:  # fmt: skip
        yield sys


def _round_of(system: System, question: str) -> Round:
    job_id, _ = system.service.submit(Problem(question=question, answer="4", kind="math"))
    system.service.wait([job_id], timeout=300, poll_s=0.1)
    with system.runtime.sessions() as s:
        return s.query(Round).filter(Round.job_id == job_id, Round.kind == "plan").one()


def test_promotion_and_rollback_switch_the_served_adapter_without_a_restart(system, server, adapters):
    registry = Registry(system.runtime.sessions)
    serving = VllmServing(server.base_url, SERVED)
    for name, path in adapters.items():
        registry.add(
            id=name, parent_id="ck-a" if name == "ck-b" else None, stage="grpo", base_model="smol",
            path=path, config={}, metrics={}, data_window={},
        )  # fmt: skip
        serving.load(name, path)  # what promotion and the gate do first
    pid = server._proc.pid if server._proc else None

    registry.promote("ck-a")
    time.sleep(0.2)
    first = _round_of(system, "What is 2 + 2?")
    registry.promote("ck-b")
    time.sleep(0.2)
    second = _round_of(system, "What is 1 + 3?")
    registry.rollback()
    time.sleep(0.2)
    third = _round_of(system, "What is 3 + 1?")

    assert (first.policy_version, first.conductor_model) == ("ck-a", f"hosted_vllm/{lora_name('ck-a')}")
    assert (second.policy_version, second.conductor_model) == ("ck-b", f"hosted_vllm/{lora_name('ck-b')}")
    assert third.policy_version == "ck-a"
    # Both adapters stay loaded under their own names (never reused), next to the base model.
    assert {SERVED, lora_name("ck-a"), lora_name("ck-b")} <= set(list_models(server.base_url))
    assert server._proc is not None and server._proc.pid == pid and server.running


def test_a_pinned_gate_candidate_runs_beside_the_active_policy(system, server, adapters):
    registry = Registry(system.runtime.sessions)
    active = registry.active()

    def ck_b_rounds() -> int:
        with system.runtime.sessions() as s:
            return s.query(Round).filter(Round.policy_version == "ck-b").count()

    before = ck_b_rounds()
    result = pinned_eval(Rollouts(system.service), Policy("ck-b", adapters["ck-b"]), [Problem(question="2+5?")], "t")

    assert result.plans == 1 and ck_b_rounds() == before + 1
    assert registry.active() == active  # evaluating a candidate changes nothing


def test_trainer_logprobs_match_vllms_processed_logprobs_under_the_plan_grammar(system, model_path):
    """vLLM samples the plan under the grammar (structured_outputs) and reports the masked distribution;
    the trainer, replaying the same grammar along the stored ids, reproduces it: the on-policy ratio is 1."""
    import torch
    from transformers import AutoTokenizer

    from conductor.domain.plan_grammar import PlanGrammar
    from conductor.domain.prompts import build_plan_messages
    from conductor.inference.grammar import masks_for
    from reward_pipeline.training.logprobs import grammar_masks, pad_batch, token_logprobs

    gateway = system.runtime.gateway
    cards = gateway.pool.cards()
    grammar = PlanGrammar.for_round(len(cards), max_steps=3, max_tokens=160, prompt_style="compact", replan=False)
    # Several plans, their tokens pooled: a plan the model is sure of (a short one-step plan) looks much the
    # same at any temperature, and one such sample alone made the temperature check below fail once in CI.
    questions = ["What is 5 + 4?", "How many times does the letter s appear in 'mississippi'?", "Name a red fruit."]
    calls = [
        gateway.call_conductor(build_plan_messages(q, cards, max_steps=3, style="compact"), grammar=grammar)
        for q in questions
    ]
    for c in calls:
        recorded = c.sampling["grammar"]
        assert float(c.sampling["temperature"]) != 1.0 and c.sampling["logprobs"] == "processed"
        assert recorded["regex"] == grammar.regex() and recorded["backend"] == "xgrammar"
        assert c.text.startswith("```python\nmodel_id = [")  # decoded under the grammar, not free text
    temperature = float(calls[0].sampling["temperature"])
    model = load_trainable(model_path, None, LoraSpec())
    masks = masks_for(AutoTokenizer.from_pretrained(model_path), int(model.config.vocab_size))

    def gaps(t: float, regex: str | None, *, off_by_one: bool = False) -> list[float]:
        out: list[float] = []
        for c in calls:
            ids, attn, _, plens = pad_batch([c.prompt_token_ids], [c.token_ids], pad_id=0)
            allowed = grammar_masks(masks, [regex], [c.token_ids], plens, ids.shape[1]) if regex else None
            if allowed is not None and off_by_one:  # each position gets the next one's mask: a replay bug
                allowed = torch.cat([allowed[:, 1:], torch.ones_like(allowed[:, :1])], dim=1)
            with torch.no_grad():
                ours = token_logprobs(model, ids, attn, torch.tensor([t]), allowed)[0, plens[0] :].tolist()
            out += [abs(a - b) for a, b in zip(ours, c.logprobs or [], strict=True)]
        return out

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs)

    masked, unmasked, raw = gaps(temperature, grammar.regex()), gaps(temperature, None), gaps(1.0, grammar.regex())
    # vLLM reports the masked distribution: a token the grammar forces has logprob exactly 0.
    reported = [lp for c in calls for lp in c.logprobs or []]
    forced = [i for i, lp in enumerate(reported) if lp == 0.0]
    assert len(forced) >= 5 and all(masked[i] < 1e-6 for i in forced)
    # The served dtype is float32 on CPUs without bf16 instructions; on others bf16 puts the two a few
    # hundredths of a nat apart, which the capped importance weight absorbs. Temperature and mask
    # must each explain vLLM's numbers far better than leaving them out does.
    assert mean(masked) < 0.06, (mean(masked), mean(unmasked), mean(raw))
    assert mean(masked) < mean(unmasked) / 2 and mean(masked) < mean(raw) / 2, (mean(masked), mean(unmasked), mean(raw))
    # A deliberately wrong mask is visible: replayed one token off, it forbids tokens the behaviour policy
    # sampled or moves their logprobs. (The grammar of a one-model pool was the wrong mask here once; it is
    # invisible whenever the sample used worker 0 and the model was sure of it: a flaky check.)
    shifted = gaps(temperature, grammar.regex(), off_by_one=True)
    assert mean(shifted) > mean(masked) + 0.05, (mean(shifted), mean(masked))
