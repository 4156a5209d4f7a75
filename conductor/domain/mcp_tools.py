"""MCP tools as workers (`model: mcp/<server>/<tool>`): what the Conductor is told about a tool, and how a
step's messages become the tool's arguments.

Pure rules over the tool's JSON Schema; talking to the server is `conductor.inference.mcp_sessions`'s job.
A tool is a program: it cannot follow an instruction, so the Conductor writes its arguments, either as a
JSON object or, for a tool that takes one string, as that string alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "MCP_PROVIDER",
    "TOOL_ERROR_PREFIX",
    "ToolArgumentsError",
    "describe_tool",
    "error_answer",
    "split_model",
    "tool_arguments",
    "undescribed",
]

MCP_PROVIDER = "mcp"
#: How a tool's failure reads as the step's answer: visible to later steps and to whoever reads the trace.
TOOL_ERROR_PREFIX = "tool error: "
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
_PROPERTY_NOTE_CHARS = 160


class ToolArgumentsError(ValueError):
    """The step gave no arguments the tool can take (the plan misused the tool: its answer, not a failure)."""


def split_model(model: str) -> tuple[str, str]:
    """(server, tool) of `mcp/<server>/<tool>`; a tool's own name may hold further slashes."""
    provider, _, rest = model.partition("/")
    server, _, tool = rest.partition("/")
    if provider != MCP_PROVIDER or not server or not tool:
        raise ValueError(f"{model!r}: an MCP tool worker is 'mcp/<server>/<tool>'")
    return server, tool


def undescribed(model: str) -> str:
    """The description of an MCP tool worker until its server describes the tool (or while it cannot)."""
    server, tool = split_model(model)
    return f"The tool {tool!r} of the MCP server {server!r}."


def error_answer(detail: str) -> str:
    return f"{TOOL_ERROR_PREFIX}{detail.strip() or 'the tool failed without saying why'}"


def describe_tool(description: str | None, schema: Mapping[str, Any] | None) -> str:
    """The tool's own description with its arguments summarised: what the Conductor needs to write them."""
    text = " ".join((description or "").split()) or "An MCP tool."
    properties, required = _properties(schema)
    if not properties:
        return f"{text} Takes no arguments."
    parts = []
    for name, prop in properties.items():
        kind = prop.get("type", "any") if isinstance(prop, Mapping) else "any"
        note = " ".join(str(prop.get("description", "")).split()) if isinstance(prop, Mapping) else ""
        if len(note) > _PROPERTY_NOTE_CHARS:
            note = note[: _PROPERTY_NOTE_CHARS - 3].rstrip() + "..."
        flag = ", required" if name in required else ""
        parts.append(f"{name} ({kind}{flag}){': ' + note if note else ''}")
    single = _single_string_argument(schema)
    how = f"the {single} alone, or a JSON object" if single else "a JSON object"
    return f"{text} Write its arguments as {how}: {'; '.join(parts)}."


def tool_arguments(schema: Mapping[str, Any] | None, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The arguments for a call from a worker step's messages (visible steps as user/assistant turns, then
    the subtask): a JSON object in the subtask, else one in the latest visible response (a model that wrote
    the call), else the subtask as the one string a tool takes, else nothing for a tool that takes nothing."""
    subtask = str(messages[-1].get("content") or "") if messages else ""
    responses = [str(m.get("content") or "") for m in messages[:-1] if m.get("role") == "assistant"]
    for text in (subtask, *responses[-1:]):
        found = _json_object(text)
        if found is not None:
            return found
    single = _single_string_argument(schema)
    if single is not None and subtask.strip():
        return {single: subtask.strip()}
    _, required = _properties(schema)
    if not required:
        return {}
    raise ToolArgumentsError(
        f"no arguments: the tool needs {', '.join(sorted(required))}, written as a JSON object"
        + (" in the subtask" if subtask.strip() else "; the subtask was empty")
    )


def _properties(schema: Mapping[str, Any] | None) -> tuple[dict[str, Any], set[str]]:
    properties = (schema or {}).get("properties") or {}
    required = (schema or {}).get("required") or []
    return (dict(properties) if isinstance(properties, Mapping) else {}), {str(r) for r in required}


def _single_string_argument(schema: Mapping[str, Any] | None) -> str | None:
    """The name of the one required property, when it is a string: the subtask can then be the argument."""
    properties, required = _properties(schema)
    if len(required) != 1:
        return None
    (name,) = required
    prop = properties.get(name)
    return name if isinstance(prop, Mapping) and prop.get("type") == "string" else None


def _json_object(text: str) -> dict[str, Any] | None:
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    if not stripped.startswith("{"):
        return None
    try:
        value = json.loads(stripped)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
