"""In-process transformers backend for small local models, registered as a litellm provider.

Model strings look like `local/<path-to-model-dir>`; calls go through `litellm.completion`
like any hosted model, so there is one code path. Completions carry the sampled token ids
and per-token logprobs in the OpenAI shape, with tokens written `token_id:N`, plus
`choices[0].token_ids` and a top-level `prompt_token_ids`: exactly what vLLM returns with
`return_tokens_as_token_ids` and `return_token_ids`, so the gateway reads both alike. Both
extra fields are plain attributes of litellm's ModelResponse / Choices, which litellm hands
back from a custom provider untouched.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import litellm
from litellm import CustomLLM
from litellm.types.utils import ChoiceLogprobs, Choices, Message, ModelResponse, Usage

PROVIDER = "local"
#: A Conductor with a LoRA adapter is addressed as `<base model dir>::<adapter dir>` (the api_base
#: the gateway passes): each promoted checkpoint is then its own cache entry, never a reload in place.
ADAPTER_SEPARATOR = "::"


@dataclass
class Generation:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    prompt_token_ids: list[int]
    finish_reason: str

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)


class LocalModel:
    """One loaded model; generation is serialised because CPU torch already uses every core."""

    def __init__(self, path: str, adapter: str | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.path = path
        self.adapter = adapter
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        if adapter:
            from peft import PeftModel

            # Merged once at load: generation then costs what the base model costs.
            model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
        self.model = model
        self.model.eval()
        self.vocab_size = int(model.config.vocab_size)
        self.lock = threading.Lock()
        self._torch = torch

    def generate(
        self,
        messages: list[dict],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
        regex: str | None = None,
        grammar: str | None = None,
    ) -> Generation:
        """Sample a completion; with `regex` (a plan grammar) or `grammar` (EBNF: an answer format), only
        tokens the grammar allows (the logprobs are the masked ones)."""
        torch = self._torch
        prompt_ids: Any = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
        if not isinstance(prompt_ids, torch.Tensor):
            prompt_ids = prompt_ids["input_ids"]
        do_sample = temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "do_sample": do_sample,
            "output_logits": True,
            "return_dict_in_generate": True,
            "pad_token_id": self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
        }
        if do_sample:
            kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
        masked = regex is not None or grammar is not None
        if masked:
            from conductor.inference.grammar import MaskingProcessor, masks_for

            masks = masks_for(self.tokenizer, self.vocab_size)
            processor = (
                MaskingProcessor(masks, regex, prompt_ids.shape[1])
                if regex is not None
                else MaskingProcessor(masks, str(grammar), prompt_ids.shape[1], kind="ebnf")
            )
            kwargs["logits_processor"] = [processor]
            kwargs["output_scores"] = True
        with self.lock, torch.inference_mode():
            if seed is not None:
                torch.manual_seed(seed)
            out = self.model.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids), **kwargs)
        new_ids = out.sequences[0, prompt_ids.shape[1] :].tolist()
        # Behaviour logprobs of the distribution actually sampled from (logits / temperature,
        # no top-k/top-p, the grammar's mask where there is one), as vLLM reports them with
        # `--logprobs-mode processed_logprobs`: the importance ratio of GRPO is taken against exactly
        # this. The processed scores already carry the mask and the temperature; greedy calls without
        # a grammar report raw logprobs.
        scale = temperature if do_sample else 1.0
        steps = out.scores if masked else tuple(lg / scale for lg in out.logits)
        logprobs = [
            float(torch.log_softmax(step[0].float(), dim=-1)[tok]) for step, tok in zip(steps, new_ids, strict=True)
        ]
        eos = self.tokenizer.eos_token_id
        finish = "stop" if new_ids and new_ids[-1] == eos else "length"
        text_ids = new_ids[:-1] if finish == "stop" else new_ids
        text = str(self.tokenizer.decode(text_ids, skip_special_tokens=True))
        return Generation(text, new_ids, logprobs, prompt_ids[0].tolist(), finish)


class LocalModelRegistry:
    """Loads each model directory once per process."""

    def __init__(self) -> None:
        self._models: dict[str, LocalModel] = {}
        self._lock = threading.Lock()

    def get(self, address: str) -> LocalModel:
        """The model at `address`: a model directory, or `<model dir>::<LoRA adapter dir>`."""
        with self._lock:
            if address not in self._models:
                path, _, adapter = address.partition(ADAPTER_SEPARATOR)
                self._models[address] = LocalModel(path, adapter or None)
            return self._models[address]

    def drop(self, address: str) -> None:
        """Forget a model so the next call reloads it."""
        with self._lock:
            self._models.pop(address, None)


class LocalProvider(CustomLLM):
    def __init__(self, registry: LocalModelRegistry) -> None:
        super().__init__()
        self.registry = registry

    def completion(
        self,
        model: str,
        messages: list,
        api_base: str,
        custom_prompt_dict: dict,
        model_response: ModelResponse,
        print_verbose: Any,
        encoding: Any,
        api_key: Any,
        logging_obj: Any,
        optional_params: dict,
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        started = time.perf_counter()
        # The gateway resolves `local/<name>` to a model directory and passes it as api_base.
        path = api_base or (model.split("/", 1)[1] if model.startswith(f"{PROVIDER}/") else model)
        structured = (optional_params.get("extra_body") or {}).get("structured_outputs") or {}
        gen = self.registry.get(path).generate(
            messages,
            regex=structured.get("regex"),
            grammar=structured.get("grammar"),
            max_tokens=int(optional_params.get("max_tokens") or optional_params.get("max_completion_tokens") or 256),
            temperature=float(optional_params.get("temperature") or 0.0),
            seed=optional_params.get("seed"),
        )
        response = ModelResponse(
            model=model,
            choices=[
                Choices(
                    index=0,
                    finish_reason=gen.finish_reason,
                    message=Message(role="assistant", content=gen.text),
                    logprobs=ChoiceLogprobs(
                        content=[
                            {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                            for t, lp in zip(gen.token_ids, gen.logprobs, strict=True)
                        ]
                    ),
                    token_ids=gen.token_ids,
                )
            ],
            prompt_token_ids=gen.prompt_token_ids,
            usage=Usage(
                prompt_tokens=gen.prompt_tokens,
                completion_tokens=len(gen.token_ids),
                total_tokens=gen.prompt_tokens + len(gen.token_ids),
            ),
        )
        response._hidden_params["local_latency_s"] = time.perf_counter() - started
        return response

    async def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:  # type: ignore[override]
        import asyncio

        return await asyncio.to_thread(self.completion, *args, **kwargs)


_registry = LocalModelRegistry()
_handler = LocalProvider(_registry)
_register_lock = threading.Lock()


def register() -> LocalModelRegistry:
    """Register the `local/` provider with litellm (idempotent) and return its model registry."""
    with _register_lock:
        # Checked against litellm's own list rather than a flag, so a test or library that
        # resets `custom_provider_map` does not leave `local/` silently unregistered.
        if not any(p.get("custom_handler") is _handler for p in litellm.custom_provider_map):
            litellm.custom_provider_map = [
                *[p for p in litellm.custom_provider_map if p.get("provider") != PROVIDER],
                {"provider": PROVIDER, "custom_handler": _handler},
            ]
    return _registry
