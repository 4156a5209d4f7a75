"""One model answer as the deterministic-call cache keeps it (the cache itself: conductor.inference.call_cache)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CachedAnswer:
    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
