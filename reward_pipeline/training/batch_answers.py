"""Model workers' answers to many subtasks at once, for the warm-up's route trials.

The trials ask each local model worker hundreds of one-step questions; one at a time through the
gateway that is ~2 s each on 2 cores. Left-padded batches of the same chat-templated messages a step
sends, decoded greedily (temperature 0, as the worker is configured) or sampled at the worker's
temperature, give the same kind of answer at a fraction of the time. Only for local models
(``local/<name>``): the trials of other pools go through the gateway.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from conductor.config.pool import WorkerSpec
from conductor.domain.prompts import build_step_messages

if TYPE_CHECKING:
    from conductor.inference.gateway import Gateway

__all__ = ["BatchAnswerer", "GatewayAnswerer"]


class BatchAnswerer:
    """Answers subtasks as local model workers; the model is loaded once."""

    def __init__(self, model_path: Path, *, batch_size: int = 16, seed: int = 0) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self._torch = torch
        self.tokenizer: Any = AutoTokenizer.from_pretrained(model_path, padding_side="left")
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model: Any = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.batch_size = batch_size
        self.seed = seed

    def __call__(self, worker: WorkerSpec, subtasks: list[str]) -> list[str]:
        torch = self._torch
        # Longest prompts together: less padding per batch.
        order = sorted(range(len(subtasks)), key=lambda i: len(subtasks[i]))
        answers: dict[int, str] = {}
        torch.manual_seed(self.seed)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            texts = [
                self.tokenizer.apply_chat_template(
                    build_step_messages(subtasks[i], []), add_generation_prompt=True, tokenize=False
                )
                for i in chunk
            ]
            enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            kwargs: dict[str, Any] = {
                "max_new_tokens": worker.max_tokens or 160,
                "pad_token_id": self.tokenizer.pad_token_id,
            }
            if worker.temperature and worker.temperature > 0:
                kwargs.update(do_sample=True, temperature=worker.temperature, top_k=0, top_p=1.0)
            else:
                kwargs.update(do_sample=False)
            with torch.inference_mode():
                gen = self.model.generate(**enc, **kwargs)
            for i, row in zip(chunk, gen[:, enc["input_ids"].shape[1] :], strict=True):
                answers[i] = str(self.tokenizer.decode(row, skip_special_tokens=True)).strip()
        return [answers[i] for i in range(len(subtasks))]


class GatewayAnswerer:
    """Answers subtasks as the pool's model workers through the gateway (retries, limits, the direct
    OpenAI-compatible path to a private vLLM server), many calls in flight: vLLM batches them."""

    def __init__(self, gateway: Gateway, *, concurrency: int = 32) -> None:
        self.gateway = gateway
        self.concurrency = concurrency

    def __call__(self, worker: WorkerSpec, subtasks: list[str]) -> list[str]:
        from concurrent.futures import ThreadPoolExecutor

        def one(subtask: str) -> str:
            return self.gateway.call_worker(worker.name, build_step_messages(subtask, [])).text.strip()

        with ThreadPoolExecutor(self.concurrency) as ex:
            return list(ex.map(one, subtasks))
