"""The whole queue on a real vLLM server: GSM8K problems end to end, traces from vLLM, policy hot-swap.

One vLLM CPU server (LoRA enabled) and one embedded system (in-process Celery worker +
SQLite) serve the whole module: the Conductor and every worker are `hosted_vllm/` models on
that server. The second test loads a LoRA adapter into the running server and switches the
Conductor to it, as the retraining loop does after promotion, with neither the server nor
the worker restarted. Traces are read back through `Service.export_traces`, the file a GRPO
trainer consumes, and checked against the tokenizer to prove they are vLLM's own ids.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from conductor.config.pool import Pool
from conductor.domain.inputs import read_problems
from conductor.domain.problem import Problem
from conductor.inference.vllm_server import VllmServer, list_models, load_lora_adapter, unload_lora_adapter
from tests.conftest import DATA
from tests.support.system import System, embedded_system

# Fixture set-up (server start, about 30-60 s on 2 cores) counts against the per-test timeout.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

SERVED = "smol-base"  # as served by tests/vllm/conftest.py
ADAPTER = "conductor-policy-1"
GSM8K = DATA / "gsm8k_test.jsonl"


def vllm_pool(base_url: str) -> Pool:
    """The bundled local pool's shape, every model served by vLLM; short completions keep CPU time low."""
    common = {"model": f"hosted_vllm/{SERVED}", "api_base": base_url, "retries": 1, "timeout_s": 120}
    return Pool.model_validate(
        {
            "conductor": {**common, "max_tokens": 160, "temperature": 0.7, "policy_version": "base"},
            "workers": [
                {
                    **common,
                    "name": "smol-precise",
                    "description": "Small fast model, low temperature: short factual answers and arithmetic.",
                    "max_tokens": 64,
                    "temperature": 0.0,
                },
                {
                    **common,
                    "name": "smol-creative",
                    "description": "Same small model at a higher temperature: brainstorming and alternatives.",
                    "max_tokens": 64,
                    "temperature": 0.8,
                    "fallback": "smol-precise",
                },
            ],
            # A 135M Conductor often writes no valid plan: one worker then answers alone.
            "fallback_worker": "smol-precise",
        }
    )


@pytest.fixture(scope="module")
def system(server: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[System]:
    home = tmp_path_factory.mktemp("home")
    # Concurrency 8 lets vLLM batch the Conductor calls of all problems at once.
    with embedded_system(
        home, vllm_pool(server.base_url), concurrency=8, recursion=False, plan_retries=0, max_steps=3
    ) as sys:
        yield sys


def _traces(system: System, out: Path, job_ids: list[str]) -> list[dict]:
    system.service.export_traces(out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    return [t for t in lines if t["job_id"] in job_ids]


def _assert_trace_came_from_vllm(trace: dict, tokenizer, *, model: str, policy_version: str) -> None:
    ids, logprobs = trace["completion_token_ids"], trace["completion_logprobs"]
    assert trace["conductor_model"] == model and trace["policy_version"] == policy_version
    assert ids and len(ids) == len(logprobs), "every Conductor round keeps its sampled ids and logprobs"
    assert all(lp <= 0.0 for lp in logprobs)
    # The ids are what vLLM sampled: decoding them gives back exactly the text it returned.
    assert tokenizer.decode(ids, skip_special_tokens=True) == trace["completion_text"]
    # The prompt ids are what vLLM tokenised: the chat template over the stored messages,
    # ending in the question (never re-tokenised by us: they come back in the response).
    prompt_ids = trace["prompt_token_ids"]
    expected = tokenizer.apply_chat_template(trace["prompt_messages"], add_generation_prompt=True, tokenize=True)
    assert prompt_ids == list(expected if isinstance(expected, list) else expected["input_ids"])
    assert trace["problem"]["question"].strip() in tokenizer.decode(prompt_ids)


def test_gsm8k_problems_run_on_vllm_and_leave_vllm_traces(system: System, tokenizer, tmp_path: Path):
    report = system.service.submit_batch(GSM8K, limit=3)
    assert len(report.job_ids) == 3 and not report.rejected
    system.service.wait(report.job_ids, timeout=300)

    for job_id in report.job_ids:
        job = system.service.job(job_id)
        assert job["status"] == "done", job["error"]
        assert job["answer"], "an answer must be recorded (correctness is not required of a 135M model)"
        steps = [st for c in job["chains"] for r in c["rounds"] for st in r["steps"]]
        assert steps and all(st["status"] == "done" for st in steps)

    traces = _traces(system, tmp_path / "traces.jsonl", report.job_ids)
    assert {t["job_id"] for t in traces} == set(report.job_ids)
    for trace in traces:
        _assert_trace_came_from_vllm(trace, tokenizer, model=f"hosted_vllm/{SERVED}", policy_version="base")
        assert trace["parse_status"] in ("ok", "failed")


def test_conductor_hot_swaps_to_a_lora_adapter_without_restarts(
    system: System, server: VllmServer, model_path: Path, tokenizer, tmp_path: Path
):
    gateway = system.runtime.gateway
    base = system.runtime.pool.conductor
    server_pid = server._proc.pid if server._proc else None
    adapter = _make_lora_adapter(model_path, tmp_path / "adapter")

    load_lora_adapter(server.base_url, ADAPTER, adapter)
    try:
        assert ADAPTER in list_models(server.base_url)
        gateway.switch_conductor(f"hosted_vllm/{ADAPTER}", policy_version=ADAPTER, api_base=server.base_url)
        problem = next(p for n, p in read_problems(GSM8K) if n == 4 and isinstance(p, Problem))
        job_id, _ = system.service.submit(problem)
        system.service.wait([job_id], timeout=180)
        job = system.service.job(job_id)
        traces = _traces(system, tmp_path / "traces.jsonl", [job_id])
    finally:
        # Leave the module's shared system and server as they were.
        gateway.switch_conductor(base.model, policy_version=base.policy_version, api_base=base.api_base)
        unload_lora_adapter(server.base_url, ADAPTER)

    assert job["status"] == "done", job["error"]
    assert traces
    for trace in traces:
        _assert_trace_came_from_vllm(trace, tokenizer, model=f"hosted_vllm/{ADAPTER}", policy_version=ADAPTER)
    # Same server process, same in-process worker: nothing was restarted for the swap.
    assert server.running and server._proc is not None and server._proc.pid == server_pid
    assert system.runtime.gateway is gateway and system.runtime.pool.conductor.policy_version == "base"


def _make_lora_adapter(model_path: Path, out: Path) -> Path:
    """A rank-8 q_proj/v_proj adapter with random B (PEFT starts B at zero, which would change nothing)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM"
    )
    peft_model = get_peft_model(base, config)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(mean=0.0, std=0.05)
    peft_model.save_pretrained(out)
    return out
