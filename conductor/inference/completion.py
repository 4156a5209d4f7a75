"""What one model call brought back, and what it cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from conductor.domain.usage import Usage


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
    prompt_token_ids: list[int] | None = None  #: the tokenised prompt as the server saw it (vLLM, local)
    #: Conductor calls: the policy that sampled this completion, fixed at call time (a switch may follow).
    policy_version: str | None = None
    sampling: dict[str, Any] | None = None  #: the behaviour policy's sampling settings (Conductor calls)
    attempts: int = 1
    served_by: str | None = None  #: the worker that finally answered (differs after a fallback)
    errors: list[str] = field(default_factory=list)
    #: Served from the deterministic-call cache: tokens and cost are those of the call that was cached.
    cached: bool = False

    def usage_counts(self) -> tuple[int, int, float]:
        return self.prompt_tokens, self.completion_tokens, self.cost_usd

    def usage(self) -> Usage:
        """What the job is charged. A cached answer still counts its tokens (the size of the workflow stays
        comparable, cache or not) but costs nothing; what it saved is counted apart."""
        if self.cached:
            return Usage(
                self.prompt_tokens,
                self.completion_tokens,
                0.0,
                self.latency_s,
                cache_hits=1,
                cached_tokens=self.prompt_tokens + self.completion_tokens,
                saved_usd=self.cost_usd,
            )
        return Usage(self.prompt_tokens, self.completion_tokens, self.cost_usd, self.latency_s)
