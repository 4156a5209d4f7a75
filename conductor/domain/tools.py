"""Tool workers: pool entries that are deterministic programs, not models (`model: tool/<name>`).

A tool receives the messages a worker step would (the visible earlier steps as user/assistant
turns, then its subtask) and answers with text, so the engine, the store and the Conductor treat
it like any other worker. Tools cost nothing and use no tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from conductor.domain.calculator import NO_EXPRESSION, calculate

__all__ = ["TOOLS", "TOOL_PROVIDER", "is_tool_miss", "run_tool"]

TOOL_PROVIDER = "tool"


def _calculator(messages: Sequence[dict[str, Any]]) -> str:
    # What a step computes is most often what the step before it wrote (a model writes the
    # expression, the calculator evaluates it), so the visible responses come first, latest first;
    # the subtask is read last, for a Conductor that writes the expression itself.
    responses = [str(m.get("content") or "") for m in messages[:-1] if m.get("role") == "assistant"]
    subtask = str(messages[-1].get("content") or "") if messages else ""
    return calculate([*reversed(responses), subtask]).text


TOOLS: dict[str, Callable[[Sequence[dict[str, Any]]], str]] = {"calculator": _calculator}


def is_tool_miss(answer: str | None) -> bool:
    """Whether ``answer`` is a tool saying it had nothing to work on (a plan that misused it): the text
    of a step, but no answer to anything."""
    return answer == NO_EXPRESSION


def run_tool(model: str, messages: Sequence[dict[str, Any]]) -> str:
    """Run the tool named by `model` (`tool/<name>`) on a step's messages."""
    name = model.split("/", 1)[1]
    try:
        tool = TOOLS[name]
    except KeyError:
        raise ValueError(f"unknown tool {name!r}; tools: {sorted(TOOLS)}") from None
    return tool(messages)
