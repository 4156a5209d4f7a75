"""What one model call cost: tokens, dollars and seconds (a value object the engine adds to a job)."""

from __future__ import annotations

from dataclasses import dataclass

#: The largest token count a job row holds (its token and budget columns are PostgreSQL INTEGERs):
#: a budget the API accepts must fit, or the job's insert fails on PostgreSQL (SQLite takes any).
MAX_TOKEN_COUNT = 2**31 - 1


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float | None = None
    #: answers served from the deterministic-call cache, their tokens and the dollars they did not cost
    cache_hits: int = 0
    cached_tokens: int = 0
    saved_usd: float = 0.0

    def __bool__(self) -> bool:
        return bool(self.prompt_tokens or self.completion_tokens or self.cost_usd or self.cache_hits)
