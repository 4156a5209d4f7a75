"""The cost knob: an effort level (OpenAI's `reasoning.effort`) mapped to how much work a problem gets.

| effort | steps per workflow | replan rounds (recursion) | samples (G) |
|---|---|---|---|
| low | 1 | off | 1 |
| medium | the deployment's `max_steps` | the deployment's `recursion` | the deployment's `samples` |
| high | the deployment's `max_steps` | on (where the deployment's `recursion` allows replans) | 3 (best of G) |

`medium` is what a request without an effort gets. A maximum USD per problem is the job's
`budget_usd`: the job stops as `budget_exceeded` before spending more.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from conductor.domain.errors import InputError

Effort = Literal["low", "medium", "high"]
EFFORTS: tuple[str, ...] = ("low", "medium", "high")
HIGH_SAMPLES = 3


@dataclass(frozen=True)
class Knob:
    """What an effort level changes: job options (merged over the request's) and the sample count."""

    options: dict[str, Any]
    samples: int | None


def knob(effort: str | None, samples: int | None = None) -> Knob:
    """The knob for `effort` (None: medium); `samples` asked for explicitly wins over the level's."""
    if effort is None or effort == "medium":
        return Knob({} if effort is None else {"effort": "medium"}, samples)
    if effort == "low":
        return Knob({"effort": "low", "max_steps": 1, "recursion": False}, samples or 1)
    if effort == "high":
        return Knob({"effort": "high", "recursion": True}, samples or HIGH_SAMPLES)
    raise InputError(f"reasoning.effort must be one of {list(EFFORTS)}, not {effort!r}")


def max_usd(value: Any) -> float | None:
    """A maximum USD per problem: a positive number, or None for no limit."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InputError(f"max_usd must be a positive number, not {value!r}")
    return float(value)
