"""The deterministic-call cache: a greedy (temperature 0) call with the same model, messages and sampling
gives the same answer, so it is made once.

Users expect it (a batch re-run, a retried job, two workflows asking one worker the same thing), and it makes
GRPO rollouts cheaper: the samples of one group often hand a worker the same subtask. Only what the model
would return again is cached: temperature 0, no logprobs, no grammar; tools are not (they cost nothing, and
an MCP tool's answer may change: the time, a search).
Hosted APIs are left out unless asked (`all`): their models change under a fixed name, and their terms may
not allow keeping outputs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, Protocol

from conductor.config.pool import ModelSpec
from conductor.domain.cached_answer import CachedAnswer
from conductor.domain.mcp_tools import MCP_PROVIDER
from conductor.domain.tools import TOOL_PROVIDER

CallCacheMode = Literal["off", "self-hosted", "all"]
#: Part of every key: bump it when what a key covers changes, so old entries are never read as new ones.
KEY_VERSION = "call-cache-1"
SELF_HOSTED_PROVIDERS = ("local",)


class CallCache(Protocol):
    def get(self, key: str) -> CachedAnswer | None: ...

    def put(self, key: str, answer: CachedAnswer) -> None: ...


def cacheable(spec: ModelSpec, mode: CallCacheMode) -> bool:
    if mode == "off" or spec.provider in (TOOL_PROVIDER, MCP_PROVIDER) or spec.temperature != 0:
        return False
    return mode == "all" or spec.provider in SELF_HOSTED_PROVIDERS or spec.api_base is not None


def cache_key(spec: ModelSpec, messages: list[dict[str, Any]], mode: CallCacheMode) -> str | None:
    """The key of a call that may be cached, else None. Everything the answer depends on is in it: the model
    (and where it is served: two servers may serve different weights under one name), the messages and the
    sampling."""
    if not cacheable(spec, mode):
        return None
    body = {
        "v": KEY_VERSION,
        "model": spec.model,
        "api_base": spec.api_base,
        "max_tokens": spec.max_tokens,
        "temperature": spec.temperature,
        "reasoning_effort": spec.reasoning_effort,
        "messages": messages,
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
