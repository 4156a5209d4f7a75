"""The one path for every model call: litellm with timeouts, retries, fallbacks, limits and accounting.

Hosted APIs and the in-process transformers backend (`local/`) go through `litellm.completion`;
a self-hosted OpenAI-protocol server (vLLM as `hosted_vllm/`, or `openai/` with an `api_base`)
is called directly over httpx (`conductor.inference.openai_compatible`: the same request
without litellm's or the openai SDK's per-call overhead), unless `direct_openai=False`.

Conductor calls also bring back what GRPO training needs, never re-tokenised: the sampled
completion token ids with their logprobs, and the prompt token ids the model actually saw.
vLLM and the local backend return them in the same shape (`logprobs.content[i].token` =
"token_id:N", `choices[0].token_ids`, top-level `prompt_token_ids`); see `conductor.inference.vllm_server`.
`Gateway.switch_conductor` swaps the served policy (e.g. a LoRA adapter just loaded into
vLLM) without a restart.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import httpx
import litellm
import openai

from conductor import telemetry
from conductor.config.pool import ConductorSpec, ModelSpec, Pool, WorkerSpec
from conductor.domain.answer_format import AnswerFormat
from conductor.domain.cached_answer import CachedAnswer
from conductor.domain.errors import ModelCallError, ModelServerUnreachable, RateLimited
from conductor.domain.mcp_tools import MCP_PROVIDER
from conductor.domain.plan_grammar import PlanGrammar
from conductor.domain.tools import TOOL_PROVIDER, run_tool
from conductor.inference import local_backend
from conductor.inference.call_cache import CallCache, CallCacheMode, cache_key
from conductor.inference.call_slots import CallSlots, NoSlots
from conductor.inference.call_span import model_call_span, record_answer
from conductor.inference.completion import Completion
from conductor.inference.grammar import behaviour_sampling, takes_grammar
from conductor.inference.local_model import local_model_path
from conductor.inference.mcp_sessions import McpServerDown, McpSessions
from conductor.inference.mcp_worker import McpTools
from conductor.inference.openai_compatible import OpenAICompatible, eligible
from conductor.inference.policy import ActivePolicy, ActivePolicyCache, lora_name
from conductor.inference.pricing import Pricing
from conductor.inference.structured import answer_text, request_fields
from conductor.inference.vllm_server import TOKEN_ID_EXTRA_BODY, TOKEN_ID_PREFIX, completion_token_ids_and_logprobs
from conductor.sandbox import run_tool_program

log = logging.getLogger(__name__)

litellm.suppress_debug_info = True  # it prints provider banners on every unknown-price lookup

# Errors worth another attempt; anything else (bad request, auth) fails at once. litellm's
# errors subclass the openai ones, except its 502/503 classes, which are listed as well.
RETRYABLE = (
    openai.RateLimitError,
    openai.APIConnectionError,  # and APITimeoutError
    openai.InternalServerError,  # every 5xx on the direct path
    litellm.exceptions.RateLimitError,
    litellm.exceptions.Timeout,
    litellm.exceptions.APIConnectionError,
    litellm.exceptions.InternalServerError,
    litellm.exceptions.ServiceUnavailableError,
    litellm.exceptions.BadGatewayError,
    McpServerDown,  # an MCP server that died or did not answer: the retry reopens its session
)


class CallLimiter(Protocol):
    """Cluster-wide admission for one call (rate and concurrency limits)."""

    def slot(self, spec: ModelSpec, *, estimated_tokens: int) -> AbstractContextManager[None]: ...


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


def _unreachable(exc: BaseException, spec: ModelSpec) -> tuple[str, str] | None:
    """(the server's address, why) when `exc` says no connection to the model server was made
    (refused, unknown host, connect timeout); None for errors of a server that answered, or a
    read timeout. litellm re-raises these as its own errors, so the cause is found in the chain."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if _is_connect_error(link):
            try:
                url = link.request.url  # type: ignore[attr-defined]  # an httpx (or httpx2) error
                where = f"{url.scheme}://{url.netloc.decode()}"
            except RuntimeError:  # httpx raises when the error was made without its request
                where = "the model server"
            return spec.api_base or where, _innermost(link)
        link = link.__cause__ or link.__context__
    return None


def _is_connect_error(exc: BaseException) -> bool:
    # By name: litellm raises httpx's classes, the openai client those of its own copy (`httpx2`).
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout) or (
        type(exc).__module__.split(".")[0].startswith("httpx")
        and type(exc).__name__ in ("ConnectError", "ConnectTimeout")
    )


def _innermost(exc: BaseException) -> str:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return str(exc) or type(exc).__name__


def _field(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def parse_logprobs(response: Any) -> tuple[list[int] | None, list[float] | None]:
    """Completion token ids and logprobs of choice 0, or None where the response lacks them.

    A lenient front of `vllm_server.completion_token_ids_and_logprobs` (the one parser of
    "token_id:N" tokens): ids are kept only when that strict parser vouches for them. A
    hosted API that writes tokens as text still yields its logprobs, with ids None, because
    guessing ids by re-tokenising the text is exactly what the trace must never do.
    Accepts a litellm ModelResponse or a raw OpenAI-shaped dict.
    """
    choices = _field(response, "choices") or []
    content = _field(_field(choices[0], "logprobs"), "content") if choices else None
    if not content:
        return None, None
    try:
        return completion_token_ids_and_logprobs(response)
    except ValueError as exc:
        tokens = [_field(item, "token") for item in content]
        if all(isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX) for t in tokens):
            # Every token was an id, so the strict parser refused on a disagreement with
            # `choices[0].token_ids`: a server bug worth seeing in the logs.
            log.warning("dropping completion token ids: %s", exc)
        return None, [float(_field(item, "logprob")) for item in content]


def parse_prompt_token_ids(response: Any) -> list[int] | None:
    """The top-level `prompt_token_ids` vLLM (with `return_token_ids`) and the local backend add."""
    ids = _field(response, "prompt_token_ids")
    return [int(i) for i in ids] if ids else None


class Gateway:
    def __init__(
        self,
        pool: Pool,
        *,
        model_home: Path,
        limiter: CallLimiter | None = None,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 30.0,
        max_inline_wait_s: float = 10.0,
        direct_openai: bool = True,
        plan_grammar: bool = True,
        cache: CallCache | None = None,
        cache_mode: CallCacheMode = "self-hosted",
        call_slots: int | None = None,
    ) -> None:
        """`call_slots`: model calls in flight at once through this gateway (one per process); None: as
        many as threads call it."""
        self.pool = pool
        self._call_slots: CallSlots | NoSlots = CallSlots(call_slots) if call_slots else NoSlots()
        self.cache, self.cache_mode = cache, cache_mode
        self.plan_grammar = plan_grammar
        self.max_inline_wait_s = max_inline_wait_s
        self.model_home = model_home
        self.limiter = limiter or NoLimits()
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.local_models = local_backend.register()
        self._direct = OpenAICompatible() if direct_openai else None
        self.pricing = Pricing()
        self._switch_lock = threading.Lock()
        self._active: ActivePolicyCache | None = None
        self._followed: str | None = None  #: the active checkpoint last acted on (None: none yet)
        self._pool_default = pool.conductor
        self.mcp = McpTools(McpSessions(pool.mcp_servers))

    # -- public ------------------------------------------------------------------------
    def call_conductor(
        self, messages: list[dict], *, pin: tuple[str, str] | None = None, grammar: PlanGrammar | None = None
    ) -> Completion:
        """Call the Conductor; `pin` = (version, adapter path) serves that policy for this call only.

        With `grammar`, a backend we serve (in-process, or a self-hosted OpenAI-protocol server such as
        vLLM) decodes the plan under it, so it parses by construction; a hosted API cannot take a
        grammar and keeps parse-and-resample. `plan_grammar=False` turns the constraint off everywhere.
        """
        self._follow_active_policy()
        # One attribute read: a call made during a switch uses the old spec or the new one, never a mix.
        spec = self.pool.conductor if pin is None else self._spec_for(ActivePolicy(*pin), self.pool.conductor)
        used = grammar if grammar is not None and self.plan_grammar and takes_grammar(spec) else None
        regex = used.regex() if used is not None else None
        result = self._call_with_retries(spec, messages, label="conductor", want_logprobs=True, regex=regex)
        result.policy_version = spec.policy_version
        result.sampling = behaviour_sampling(spec.temperature, spec.max_tokens, used)
        return result

    def switch_conductor(
        self,
        model: str,
        *,
        policy_version: str,
        api_base: str | None = None,
        adapter: str | None = None,
        temperature: float | None = None,
    ) -> ConductorSpec:
        """Serve the Conductor from `model` from the next call on, without a restart; returns the new spec.

        The retraining loop calls this after loading a promoted LoRA adapter into vLLM
        (`vllm_server.load_lora_adapter`), e.g. `switch_conductor("hosted_vllm/policy-7",
        policy_version="policy-7")`. Every other setting (temperature, max tokens, limits)
        is kept. `api_base=None` keeps the current endpoint; pass "" to clear it (a hosted
        API). The spec is replaced on the Pool object this gateway shares with the Engine,
        so the rounds it records from now on carry the new `policy_version`. This switches
        this process only: other worker processes need the same call (e.g. via a broadcast).
        """
        with self._switch_lock:
            current = self.pool.conductor
            update: dict[str, Any] = {"model": model, "policy_version": policy_version, "adapter": adapter}
            if api_base is not None:
                update["api_base"] = api_base or None
            if temperature is not None:
                update["temperature"] = temperature
            # model_copy skips validation; re-validating catches a bad model string before it is served.
            spec = ConductorSpec.model_validate(current.model_copy(update=update).model_dump())
            self.pool.conductor = spec
        log.info("conductor switched: %s (%s) -> %s (%s)", current.model, current.policy_version, model, policy_version)
        return spec

    def follow(self, active: ActivePolicyCache) -> None:
        """Serve the store's active checkpoint from now on (and the pool's own Conductor when none is)."""
        self._active = active
        self._pool_default = self.pool.conductor

    def _follow_active_policy(self) -> None:
        # Acts on *changes* of the store's active checkpoint only, so an explicit switch_conductor
        # (a test, a canary process) holds until the next promotion or rollback.
        if self._active is None:
            return
        policy = self._active.get()
        version = policy.version if policy else None
        if version == self._followed:
            return
        self._followed = version
        if policy is None:  # rolled back past every checkpoint: the pool's own Conductor
            with self._switch_lock:
                self.pool.conductor = self._pool_default
            return
        spec = self._spec_for(policy, self._pool_default)
        self.switch_conductor(spec.model, policy_version=spec.policy_version, adapter=spec.adapter)

    @staticmethod
    def _spec_for(policy: ActivePolicy, base: ConductorSpec) -> ConductorSpec:
        """The Conductor spec that serves `policy` on `base`'s backend."""
        if base.provider == local_backend.PROVIDER:
            update: dict[str, Any] = {"policy_version": policy.version, "adapter": policy.adapter_path}
        else:  # vLLM: the adapter was loaded under its own name on the pool's server (promotion, gate)
            update = {"model": f"{base.provider}/{lora_name(policy.version)}", "policy_version": policy.version}
        return base.model_copy(update=update)

    def call_worker(self, name: str, messages: list[dict], *, answer_format: AnswerFormat | None = None) -> Completion:
        """Call a worker; after its retries fail, walk its fallback chain. With `answer_format`, the
        worker is asked for that format in its backend's terms (`conductor.inference.structured`)."""
        tried: list[str] = []
        errors: list[str] = []
        transient = True  #: every worker tried failed in a way worth trying again later
        current: WorkerSpec | None = self.pool.worker(name)
        while current is not None and current.name not in tried:
            tried.append(current.name)
            try:
                result = self._cached_call(current, messages, answer_format)
                result.errors = errors + result.errors
                result.worker = name
                result.served_by = current.name
                return result
            except RateLimited:
                raise  # not a failure: the step is re-queued and retries this same worker later
            except ModelCallError as exc:
                if len(tried) == 1 and not current.fallback:
                    raise  # no fallback: the error as it is (a ModelServerUnreachable stays one)
                errors.append(str(exc))  # it starts with the worker's name
                transient = transient and exc.retryable
                current = self.pool.worker(current.fallback) if current.fallback else None
        raise ModelCallError("; ".join(errors) or f"{name}: no attempt made", retryable=transient and bool(errors))

    def call_spec(
        self, spec: ModelSpec, messages: list[dict], *, label: str, answer_format: AnswerFormat | None = None
    ) -> Completion:
        return self._call_with_retries(spec, messages, label=label, answer_format=answer_format)

    def close(self) -> None:
        """Close the MCP sessions this process holds (their stdio servers exit)."""
        self.mcp.sessions.close()

    # -- internals ---------------------------------------------------------------------
    def _cached_call(self, spec: WorkerSpec, messages: list[dict], answer_format: AnswerFormat | None) -> Completion:
        # The format's instruction is in the messages, so the key tells formatted calls apart too.
        key = cache_key(spec, messages, self.cache_mode) if self.cache is not None else None
        hit = self.cache.get(key) if self.cache is not None and key is not None else None
        if hit is not None:
            return Completion(**vars(hit), worker=spec.name, served_by=spec.name, cached=True)
        result = self._call_with_retries(spec, messages, label=spec.name, answer_format=answer_format)
        if self.cache is not None and key is not None:
            self.cache.put(key, CachedAnswer(result.text, result.model, *result.usage_counts()))
        return result

    def _call_with_retries(
        self,
        spec: ModelSpec,
        messages: list[dict],
        *,
        label: str,
        want_logprobs: bool = False,
        regex: str | None = None,
        answer_format: AnswerFormat | None = None,
    ) -> Completion:
        if not telemetry.enabled():  # the hot path when tracing is off: no span object at all
            return self._retrying(
                spec, messages, label=label, want_logprobs=want_logprobs, regex=regex, answer_format=answer_format
            )
        with model_call_span(spec, messages, label=label) as span:
            result = self._retrying(
                spec, messages, label=label, want_logprobs=want_logprobs, regex=regex, answer_format=answer_format
            )
            record_answer(span, result)
            return result

    def _retrying(
        self,
        spec: ModelSpec,
        messages: list[dict],
        *,
        label: str,
        want_logprobs: bool,
        regex: str | None,
        answer_format: AnswerFormat | None = None,
    ) -> Completion:
        errors: list[str] = []
        last: Exception | None = None
        for attempt in range(1, spec.retries + 2):
            try:
                result = self._call_once(
                    spec, messages, label=label, want_logprobs=want_logprobs, regex=regex, answer_format=answer_format
                )
                result.attempts = attempt
                result.errors = errors
                return result
            except RETRYABLE as exc:
                last = exc
                errors.append(f"attempt {attempt}: {type(exc).__name__}: {str(exc)[:300]}")
                retry_after = _retry_after(exc)
                if retry_after is not None and retry_after > self.max_inline_wait_s:
                    # A long Retry-After would hold a worker slot asleep: hand the work back to
                    # the queue with that countdown instead (the task re-queues on RateLimited).
                    raise RateLimited(
                        f"{label}: provider asked to retry after {retry_after:g}s", retry_after=retry_after
                    ) from exc
                if attempt > spec.retries:
                    break
                delay = self._delay(attempt, retry_after)
                log.info("%s: %s; retrying in %.1fs", label, errors[-1], delay)
                time.sleep(delay)
            except RateLimited:
                raise  # our own cluster limit said "later": the caller re-queues, nothing failed
            except Exception as exc:  # bad request, auth, unknown model: retrying will not help
                raise ModelCallError(f"{label}: {type(exc).__name__}: {str(exc)[:500]}") from exc
        unreachable = _unreachable(last, spec) if last is not None else None
        if unreachable is not None:
            raise ModelServerUnreachable(label, *unreachable, attempts=spec.retries + 1) from last
        raise ModelCallError(f"{label}: failed after {spec.retries + 1} attempts: {errors[-1]}", retryable=True)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s * 4)
        # Exponential backoff with full jitter, so that many workers hitting one provider spread out.
        return random.uniform(0, min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1)))

    def _call_once(
        self,
        spec: ModelSpec,
        messages: list[dict],
        *,
        label: str,
        want_logprobs: bool,
        regex: str | None = None,
        answer_format: AnswerFormat | None = None,
    ) -> Completion:
        if spec.provider == TOOL_PROVIDER:
            return self._run_tool(spec, messages, label=label)
        if spec.provider == MCP_PROVIDER:
            with self._call_slots.slot(), self.limiter.slot(spec, estimated_tokens=0):
                return self.mcp.call(spec, messages, label=label)
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
            kwargs["api_key"] = os.environ.get(spec.api_key_env)
        elif spec.provider in ("openai", "hosted_vllm") and spec.api_base:
            kwargs["api_key"] = "unused"  # local OpenAI-compatible servers want some key
        if spec.provider == local_backend.PROVIDER:
            address = str(self._local_path(spec.model))
            adapter = spec.adapter_path() if isinstance(spec, ConductorSpec) else None
            kwargs["api_base"] = f"{address}{local_backend.ADAPTER_SEPARATOR}{adapter}" if adapter else address
        if spec.reasoning_effort:
            kwargs["reasoning_effort"] = spec.reasoning_effort
            kwargs["drop_params"] = True
        if want_logprobs:
            kwargs["logprobs"] = True
            kwargs["top_p"] = 1.0  # explicit: a server's generation_config defaults must not truncate
            if spec.provider in ("hosted_vllm", "openai") and spec.api_base:
                # vLLM then writes logprob tokens as "token_id:N" and adds choices[0].token_ids and
                # prompt_token_ids; other OpenAI-compatible servers ignore unknown fields.
                kwargs["extra_body"] = {**TOKEN_ID_EXTRA_BODY, "top_k": -1}
        if regex is not None:
            # vLLM 0.32 reads `structured_outputs` (the old guided_* fields are silently ignored); the
            # in-process backend reads the same field from litellm's pass-through extra_body.
            kwargs["extra_body"] = {**kwargs.get("extra_body", {}), "structured_outputs": {"regex": regex}}
        if answer_format is not None:
            fields = request_fields(spec, answer_format)
            extra = {**kwargs.get("extra_body", {}), **fields.pop("extra_body", {})}
            kwargs.update(fields, **({"extra_body": extra} if extra else {}))
        estimate = spec.max_tokens + sum(len(str(m.get("content", ""))) for m in messages) // 4
        started = time.perf_counter()
        direct = self._direct is not None and eligible(spec.provider, spec.api_base, spec.reasoning_effort)
        conductor = isinstance(spec, ConductorSpec)
        with self._call_slots.slot(conductor=conductor), self.limiter.slot(spec, estimated_tokens=estimate):
            response = self._direct.completion(kwargs) if direct and self._direct else litellm.completion(**kwargs)
        latency = time.perf_counter() - started
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        token_ids, logprobs = parse_logprobs(response) if want_logprobs else (None, None)
        prompt_token_ids = parse_prompt_token_ids(response) if want_logprobs else None
        return Completion(
            text=answer_text(response.choices[0].message),
            model=spec.model,
            worker=label,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=self.pricing.cost(spec, None if direct else response, prompt_tokens, completion_tokens),
            latency_s=latency,
            token_ids=token_ids,
            logprobs=logprobs,
            prompt_token_ids=prompt_token_ids,
            served_by=label,
        )

    @staticmethod
    def _run_tool(spec: ModelSpec, messages: list[dict], *, label: str) -> Completion:
        # No limiter slot, no retries needed: a tool is local, deterministic and free.
        started = time.perf_counter()
        text = run_tool(spec.model, messages, execute=run_tool_program)
        return Completion(
            text=text, model=spec.model, worker=label, latency_s=time.perf_counter() - started, served_by=label
        )

    def _local_path(self, model: str) -> Path:
        return local_model_path(self.model_home, model)
