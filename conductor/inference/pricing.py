"""What a call cost: the pool's price when it gives one, else litellm's local price map."""

from __future__ import annotations

import threading
from typing import Any

import litellm

from conductor.config.pool import ModelSpec
from conductor.inference import local_backend


class Pricing:
    """Prices calls. A model litellm's map does not know is remembered: asking again costs a failed
    lookup through its fallback rules on every call (a few % of a worker's CPU at zero latency)."""

    def __init__(self) -> None:
        self._unpriced: set[str] = set()
        self._lock = threading.Lock()

    def cost(self, spec: ModelSpec, response: Any | None, prompt_tokens: int, completion_tokens: int) -> float:
        """`response`: litellm's response to price; None for a direct call (its token counts are priced)."""
        if spec.price is not None:
            return prompt_tokens * spec.price.input_per_token + completion_tokens * spec.price.output_per_token
        if spec.provider in (local_backend.PROVIDER, "hosted_vllm") or spec.model in self._unpriced:
            return 0.0
        try:
            if response is None:
                costs = litellm.cost_per_token(
                    model=spec.model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
                )
                return float(sum(costs))
            return float(litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:  # unknown models have no price in the local map
            with self._lock:
                self._unpriced.add(spec.model)
            return 0.0
