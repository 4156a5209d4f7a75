"""The one path for every model call: litellm with timeouts, retries, fallbacks, limits and accounting.

Hosted APIs, OpenAI-compatible servers, vLLM (`hosted_vllm/`) and the in-process
transformers backend (`local/`) all go through `litellm.completion`.
"""

from __future__ import annotations

import contextlib
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, Iterator, Protocol

import litellm

from conductor import local_backend
from conductor.errors import RateLimited, WorkerCallError
from conductor.pool import ModelSpec, Pool, WorkerSpec

litellm.suppress_debug_info = True  # it prints provider banners on every unknown-price lookup

# Errors worth another attempt; anything else (bad request, auth) fails at once.
RETRYABLE = (
    litellm.exceptions.RateLimitError,
    litellm.exceptions.Timeout,
    litellm.exceptions.APIConnectionError,
    litellm.exceptions.InternalServerError,
    litellm.exceptions.ServiceUnavailableError,
    litellm.exceptions.BadGatewayError,
)


@dataclass
class Completion:
    text: str
    model: str
    worker: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    attempts: int = 1
    served_by: str | None = None  #: the worker that finally answered (differs after a fallback)
    errors: list[str] = field(default_factory=list)


class CallLimiter(Protocol):
    """Cluster-wide admission for one call (rate and concurrency limits)."""

    def slot(self, spec: ModelSpec, *, estimated_tokens: int) -> ContextManager[None]: ...


class NoLimits:
    @contextlib.contextmanager
    def slot(self, spec: ModelSpec, *, estimated_tokens: int) -> Iterator[None]:
        yield


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None) or getattr(exc, "litellm_response_headers", None) or {}
    try:
        value = headers.get("retry-after") or headers.get("Retry-After")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def parse_logprobs(response: Any) -> tuple[list[int] | None, list[float] | None]:
    """Token ids and logprobs from an OpenAI-shaped response whose tokens read `token_id:N`."""
    choice = response.choices[0]
    lp = getattr(choice, "logprobs", None)
    content = getattr(lp, "content", None) if lp is not None and not isinstance(lp, dict) else (lp or {}).get("content")
    if not content:
        return None, None
    ids: list[int] = []
    values: list[float] = []
    for item in content:
        token = item["token"] if isinstance(item, dict) else item.token
        logprob = item["logprob"] if isinstance(item, dict) else item.logprob
        values.append(float(logprob))
        if isinstance(token, str) and token.startswith("token_id:"):
            ids.append(int(token.split(":", 1)[1]))
    return (ids if len(ids) == len(values) else None), values


class Gateway:
    def __init__(
        self,
        pool: Pool,
        *,
        model_home: Path,
        limiter: CallLimiter | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
    ) -> None:
        self.pool = pool
        self.model_home = model_home
        self.limiter = limiter or NoLimits()
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.local_models = local_backend.register()

    # -- public ------------------------------------------------------------------------
    def call_conductor(self, messages: list[dict]) -> Completion:
        return self._call_with_retries(self.pool.conductor, messages, label="conductor", want_logprobs=True)

    def call_worker(self, name: str, messages: list[dict]) -> Completion:
        """Call a worker; after its retries fail, walk its fallback chain."""
        tried: list[str] = []
        errors: list[str] = []
        current: WorkerSpec | None = self.pool.worker(name)
        while current is not None and current.name not in tried:
            tried.append(current.name)
            try:
                result = self._call_with_retries(current, messages, label=current.name)
                result.errors = errors + result.errors
                result.worker = name
                result.served_by = current.name
                return result
            except RateLimited:
                raise  # not a failure: the step is re-queued and retries this same worker later
            except WorkerCallError as exc:
                errors.append(f"{current.name}: {exc}")
                current = self.pool.worker(current.fallback) if current.fallback else None
        raise WorkerCallError("; ".join(errors) or f"{name}: no attempt made")

    def call_spec(self, spec: ModelSpec, messages: list[dict], *, label: str) -> Completion:
        return self._call_with_retries(spec, messages, label=label)

    # -- internals ---------------------------------------------------------------------
    def _call_with_retries(
        self, spec: ModelSpec, messages: list[dict], *, label: str, want_logprobs: bool = False
    ) -> Completion:
        errors: list[str] = []
        for attempt in range(1, spec.retries + 2):
            try:
                result = self._call_once(spec, messages, label=label, want_logprobs=want_logprobs)
                result.attempts = attempt
                result.errors = errors
                return result
            except RETRYABLE as exc:
                errors.append(f"attempt {attempt}: {type(exc).__name__}: {str(exc)[:300]}")
                if attempt > spec.retries:
                    break
                time.sleep(self._delay(attempt, _retry_after(exc)))
            except RateLimited:
                raise  # our own cluster limit said "later": the caller re-queues, nothing failed
            except Exception as exc:  # noqa: BLE001 - bad request, auth, unknown model: retrying will not help
                raise WorkerCallError(f"{label}: {type(exc).__name__}: {str(exc)[:500]}") from exc
        raise WorkerCallError(f"{label}: failed after {spec.retries + 1} attempts: {errors[-1]}", retryable=True)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s * 4)
        # Exponential backoff with full jitter, so that many workers hitting one provider spread out.
        return random.uniform(0, min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))

    def _call_once(self, spec: ModelSpec, messages: list[dict], *, label: str, want_logprobs: bool) -> Completion:
        kwargs: dict[str, Any] = {
            "model": spec.model,
            "messages": messages,
            "max_tokens": spec.max_tokens,
            "temperature": spec.temperature,
            "timeout": spec.timeout_s,
            "num_retries": 0,
        }
        if spec.api_base:
            kwargs["api_base"] = spec.api_base
        if spec.api_key_env:
            import os

            kwargs["api_key"] = os.environ.get(spec.api_key_env)
        elif spec.provider in ("openai", "hosted_vllm") and spec.api_base:
            kwargs["api_key"] = "unused"  # local OpenAI-compatible servers want some key
        if spec.provider == local_backend.PROVIDER:
            kwargs["api_base"] = str(self._local_path(spec.model))
        if spec.reasoning_effort:
            kwargs["reasoning_effort"] = spec.reasoning_effort
            kwargs["drop_params"] = True
        if want_logprobs:
            kwargs["logprobs"] = True
            if spec.provider in ("hosted_vllm", "openai") and spec.api_base:
                kwargs["extra_body"] = {"return_tokens_as_token_ids": True}
        estimate = spec.max_tokens + sum(len(str(m.get("content", ""))) for m in messages) // 4
        started = time.perf_counter()
        with self.limiter.slot(spec, estimated_tokens=estimate):
            response = litellm.completion(**kwargs)
        latency = time.perf_counter() - started
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        token_ids, logprobs = parse_logprobs(response) if want_logprobs else (None, None)
        return Completion(
            text=response.choices[0].message.content or "",
            model=spec.model,
            worker=label,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self._cost(spec, response, prompt_tokens, completion_tokens),
            latency_s=latency,
            token_ids=token_ids,
            logprobs=logprobs,
            served_by=label,
        )

    def _cost(self, spec: ModelSpec, response: Any, prompt_tokens: int, completion_tokens: int) -> float:
        if spec.price is not None:
            return prompt_tokens * spec.price.input_per_token + completion_tokens * spec.price.output_per_token
        if spec.provider in (local_backend.PROVIDER, "hosted_vllm"):
            return 0.0
        try:
            return float(litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:  # noqa: BLE001 - unknown models have no price in the local map
            return 0.0

    def _local_path(self, model: str) -> Path:
        name = model.split("/", 1)[1]
        path = Path(name)
        return path if path.is_absolute() else (self.model_home / "models" / name).resolve()
