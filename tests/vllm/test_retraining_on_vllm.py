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
from reward_pipeline.training.cycle import pinned_eval
from reward_pipeline.training.online import Policy
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


def test_trainer_logprobs_match_vllms_processed_logprobs_at_the_sampled_temperature(system, model_path):
    import torch

    from reward_pipeline.training.logprobs import pad_batch, token_logprobs

    rnd = _round_of(system, "What is 5 + 4?")
    temperature = float(rnd.sampling["temperature"])
    assert temperature != 1.0 and rnd.sampling.get("logprobs") == "processed"
    adapter_version = rnd.policy_version
    registry = Registry(system.runtime.sessions)
    adapter = None if adapter_version == "base" else Path(registry.get(adapter_version).path or "")
    model = load_trainable(model_path, adapter, LoraSpec())
    ids, attn, _, plens = pad_batch([rnd.prompt_token_ids], [rnd.completion_token_ids], pad_id=0)

    def mean_gap(t: float) -> float:
        with torch.no_grad():
            ours = token_logprobs(model, ids, attn, torch.tensor([t]))[0, plens[0] :].tolist()
        return sum(abs(a - b) for a, b in zip(ours, rnd.completion_logprobs, strict=True)) / len(ours)

    at_recorded, at_raw = mean_gap(temperature), mean_gap(1.0)
    # vLLM on CPU serves bf16 (the trainer is fp32): a few hundredths of a nat per token apart, which
    # the capped importance weight absorbs. The recorded temperature must explain vLLM's numbers far
    # better than the raw distribution does, or the ratio would be taken against the wrong policy.
    assert at_recorded < 0.06, (at_recorded, at_raw)
    assert at_recorded < at_raw / 2, (at_recorded, at_raw)
