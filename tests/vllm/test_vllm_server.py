"""A real vLLM CPU server: token ids + logprobs through litellm, and LoRA hot-loading.

One server is started for the whole module (about 30 s on 2 cores); every test talks to it.
The module skips only when the vLLM venv is missing (`scripts/setup_vllm_venv.sh` builds it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from conductor.inference.vllm_server import (
    TOKEN_ID_EXTRA_BODY,
    VllmServer,
    VllmServerError,
    completion_token_ids_and_logprobs,
    list_models,
    load_lora_adapter,
    unload_lora_adapter,
)

pytestmark = pytest.mark.vllm

MODEL_HOME = Path(os.environ.get("CONDUCTOR_TEST_MODEL_HOME", Path(__file__).resolve().parents[2] / ".conductor"))
SERVED = "smol-base"  # as served by tests/vllm/conftest.py
MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]


def _chat(server: VllmServer, model: str, max_tokens: int = 24):
    import litellm

    return litellm.completion(
        model=f"hosted_vllm/{model}",
        api_base=server.base_url,
        messages=MESSAGES,
        max_tokens=max_tokens,
        temperature=0.0,
        logprobs=True,
        extra_body=TOKEN_ID_EXTRA_BODY,
    )


def test_chat_completion_through_litellm_carries_token_ids_and_logprobs(server, tokenizer):
    response = _chat(server, SERVED)
    text = response.choices[0].message.content
    ids, logprobs = completion_token_ids_and_logprobs(response)

    assert text.strip()
    assert len(ids) == len(logprobs) == response.usage.completion_tokens > 0
    assert all(lp <= 0.0 for lp in logprobs)
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_lora_adapter_hot_loads_changes_outputs_and_unloads(server, model_path, tmp_path):
    first, second = _make_lora_adapters(model_path, tmp_path)
    _, base_logprobs = completion_token_ids_and_logprobs(_chat(server, SERVED, max_tokens=8))

    load_lora_adapter(server.base_url, "policy", first)
    try:
        assert set(list_models(server.base_url)) >= {SERVED, "policy"}
        ids, first_logprobs = completion_token_ids_and_logprobs(_chat(server, "policy", max_tokens=8))
        assert ids and len(ids) == len(first_logprobs)
        # Greedy decoding of the same prompt: the first token's logprob depends only on the
        # weights, so an adapter that really took effect must move it.
        assert first_logprobs[0] != pytest.approx(base_logprobs[0], abs=1e-4)

        # A new checkpoint replaces the weights behind the same name, still without a restart.
        load_lora_adapter(server.base_url, "policy", second, replace=True)
        _, second_logprobs = completion_token_ids_and_logprobs(_chat(server, "policy", max_tokens=8))
        assert second_logprobs[0] != pytest.approx(first_logprobs[0], abs=1e-4)
    finally:
        unload_lora_adapter(server.base_url, "policy")
    assert "policy" not in list_models(server.base_url)
    # The base model keeps serving, unchanged, after the adapter is gone.
    _, after = completion_token_ids_and_logprobs(_chat(server, SERVED, max_tokens=8))
    assert after[0] == pytest.approx(base_logprobs[0], abs=1e-4)


def test_loading_a_missing_adapter_raises_a_clear_error(server, tmp_path):
    with pytest.raises(VllmServerError, match="load_lora_adapter"):
        load_lora_adapter(server.base_url, "nope", tmp_path / "does-not-exist")


def test_start_reports_log_tail_when_the_process_dies(tmp_path, model_path):
    # The test venv's python has no vllm, so the server dies at import: start() must say why.
    srv = VllmServer(model_path, served_name="x", python=sys.executable, log_path=tmp_path / "log")
    with pytest.raises(VllmServerError, match=r"(?s)exited with code .*vllm"):
        srv.start(timeout=60)
    assert not srv.running


def test_parser_reads_raw_openai_dicts_and_rejects_plain_tokens():
    raw = {
        "choices": [
            {
                "token_ids": [5, 7],
                "logprobs": {
                    "content": [{"token": "token_id:5", "logprob": -0.5}, {"token": "token_id:7", "logprob": -1.0}]
                },
            }
        ]
    }
    assert completion_token_ids_and_logprobs(raw) == ([5, 7], [-0.5, -1.0])
    raw["choices"][0]["logprobs"]["content"][0]["token"] = "Hello"
    with pytest.raises(ValueError, match="return_tokens_as_token_ids"):
        completion_token_ids_and_logprobs(raw)


def _make_lora_adapters(model_path: Path, out: Path) -> tuple[Path, Path]:
    """Two rank-8 q_proj/v_proj adapters with different random B matrices (PEFT starts B at zero)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, task_type="CAUSAL_LM"
    )
    peft_model = get_peft_model(base, config)
    paths = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.normal_(mean=0.0, std=0.05)
        peft_model.save_pretrained(out / f"adapter-{seed}")
        paths.append(out / f"adapter-{seed}")
    return paths[0], paths[1]
