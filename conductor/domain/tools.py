"""Tool workers: pool entries that are deterministic programs, not models (`model: tool/<name>`).

A tool receives the messages a worker step would (the visible earlier steps as user/assistant
turns, then its subtask) and answers with text, so the engine, the store and the Conductor treat
it like any other worker. Tools cost nothing and use no tokens.

The calculator runs here; the python tool finds its code and words its answer here, but its program
runs in a sandboxed subprocess the caller passes in as ``execute`` (the gateway passes
`conductor.sandbox.run_tool_program`): the domain starts no processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from conductor.domain.calculator import NO_EXPRESSION, calculate
from conductor.domain.python_tool import NO_CODE, ProgramRun, run_python_tool

__all__ = ["TOOLS", "TOOL_PROVIDER", "Execute", "is_tool_miss", "run_tool"]

TOOL_PROVIDER = "tool"

#: Runs a program in a sandbox and reports how it ended.
Execute = Callable[[str], ProgramRun]


def _texts(messages: Sequence[dict[str, Any]]) -> list[str]:
    # What a step computes is most often what the step before it wrote (a model writes the
    # expression or the code, the tool evaluates it), so the visible responses come first, latest
    # first; the subtask is read last, for a Conductor that writes the expression itself.
    responses = [str(m.get("content") or "") for m in messages[:-1] if m.get("role") == "assistant"]
    subtask = str(messages[-1].get("content") or "") if messages else ""
    return [*reversed(responses), subtask]


def _calculator(messages: Sequence[dict[str, Any]], execute: Execute | None) -> str:
    return calculate(_texts(messages)).text


def _python(messages: Sequence[dict[str, Any]], execute: Execute | None) -> str:
    if execute is None:
        raise ValueError("the python tool runs code: pass run_tool an `execute` (a sandbox) to run it in")
    return run_python_tool(_texts(messages), execute)


TOOLS: dict[str, Callable[[Sequence[dict[str, Any]], Execute | None], str]] = {
    "calculator": _calculator,
    "python": _python,
}


def is_tool_miss(answer: str | None) -> bool:
    """Whether ``answer`` is a tool saying it had nothing to work on (a plan that misused it): the text
    of a step, but no answer to anything."""
    return answer in (NO_EXPRESSION, NO_CODE)


def run_tool(model: str, messages: Sequence[dict[str, Any]], *, execute: Execute | None = None) -> str:
    """Run the tool named by `model` (`tool/<name>`) on a step's messages; ``execute`` runs a program
    in a sandbox (the python tool needs one)."""
    name = model.split("/", 1)[1]
    try:
        tool = TOOLS[name]
    except KeyError:
        raise ValueError(f"unknown tool {name!r}; tools: {sorted(TOOLS)}") from None
    return tool(messages, execute)
