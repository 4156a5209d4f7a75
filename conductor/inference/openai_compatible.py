"""The direct path to a self-hosted OpenAI-compatible server (vLLM, SGLang, llama.cpp, ...).

litellm earns its place where a request must be translated (Anthropic, Gemini, Bedrock, the
in-process backend). A server that already speaks the OpenAI protocol needs no translation, and
there litellm's per-call work (cost lookup in its price map, logging payloads, response
metadata, a logging thread-pool hand-off) was measured at about three quarters of the CPU of
the call itself and a third of a worker's CPU at zero model latency
(`benchmarks/orchestration_overhead.py --profile`). This path sends the same request with the
official `openai` client (one pooled client per server, its own retries off: the gateway
retries) and returns its response object, which the gateway reads exactly like litellm's.
Errors are the `openai` exceptions litellm's own subclass, so retry and fallback rules are one.
"""

from __future__ import annotations

import threading
from typing import Any

import openai

#: Extra keys litellm accepts that the OpenAI client does not; they are never sent on this path.
_LITELLM_ONLY = ("num_retries", "api_base", "api_key", "drop_params", "model", "timeout")


def eligible(provider: str, api_base: str | None, reasoning_effort: str | None) -> bool:
    """True for a request litellm would pass through untranslated: an OpenAI-protocol server of our own."""
    # reasoning_effort relies on litellm's drop_params for servers that reject it.
    return provider in ("openai", "hosted_vllm") and bool(api_base) and not reasoning_effort


class OpenAICompatible:
    """Pooled `openai.OpenAI` clients, one per (server, key), shared by every thread of a process."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str], openai.OpenAI] = {}
        self._lock = threading.Lock()

    def _client(self, api_base: str, api_key: str) -> openai.OpenAI:
        key = (api_base, api_key)
        client = self._clients.get(key)
        if client is None:
            with self._lock:
                client = self._clients.get(key)
                if client is None:
                    client = openai.OpenAI(base_url=api_base, api_key=api_key, max_retries=0)
                    self._clients[key] = client
        return client

    def completion(self, kwargs: dict[str, Any]) -> Any:
        """One chat completion from the gateway's litellm-style `kwargs` (model as `<provider>/<name>`)."""
        body = {k: v for k, v in kwargs.items() if k not in _LITELLM_ONLY}
        client = self._client(str(kwargs["api_base"]), str(kwargs.get("api_key") or "unused"))
        return client.chat.completions.create(
            model=str(kwargs["model"]).split("/", 1)[1], timeout=kwargs.get("timeout"), **body
        )

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
