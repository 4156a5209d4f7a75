"""An answer format (`conductor.domain.answer_format`) in each backend's own terms.

Where we serve the model (the in-process backend, vLLM) the step is decoded under a grammar: one
EBNF text built by xgrammar from the format's JSON Schema, sent as ``structured_outputs.grammar``,
so both backends mask with the same grammar (vLLM 0.32 and the local backend run the same xgrammar).
JSON is written without free whitespace: a small model given room for whitespace may spend its
whole token budget on it, and an integer without bounds is held to the range JSON numbers keep exactly
(RFC 7493, I-JSON: +-(2**53 - 1)), where a small model may otherwise write digits until its token cap.
With ``tool_choice: "auto"`` the grammar is a function call or text that
does not start with ``{``. A hosted API gets its own ``response_format`` or ``tools``, and a function
call it returns as ``tool_calls`` is written back as the call object the format checks.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from conductor.config.pool import ModelSpec
from conductor.domain.answer_format import AnswerFormat
from conductor.inference.grammar import takes_grammar

__all__ = ["answer_text", "request_fields"]

#: The integers every JSON reader keeps exactly (RFC 7493, 2.2).
SAFE_INTEGER = 2**53 - 1
#: Text that is not a function call: anything not opening with "{" (nor with blank space before it).
_TEXT = r"[^{\s][\s\S]*"


def request_fields(spec: ModelSpec, fmt: AnswerFormat) -> dict[str, Any]:
    """What to add to a call's litellm-style kwargs so that `spec` answers in `fmt`."""
    if takes_grammar(spec):
        return {"extra_body": {"structured_outputs": {"grammar": grammar_of(fmt)}}}
    if fmt.kind == "json_object":
        return {"response_format": {"type": "json_object"}, "drop_params": True}
    if fmt.kind == "json_schema":
        schema = {"name": fmt.name, "schema": fmt.schema, "strict": fmt.strict}
        return {"response_format": {"type": "json_schema", "json_schema": schema}, "drop_params": True}
    tools = [
        {"type": "function", "function": {"name": f.name, "description": f.description, "parameters": f.parameters}}
        for f in fmt.functions
    ]
    choice: Any = fmt.tool_choice
    if choice not in ("auto", "required"):
        choice = {"type": "function", "function": {"name": choice}}
    return {"tools": tools, "tool_choice": choice, "drop_params": True}


def answer_text(message: Any) -> str:
    """A response message's answer: its first tool call as the call object, else its content."""
    calls = _get(message, "tool_calls") or []
    if calls:
        function = _get(calls[0], "function")
        arguments = _get(function, "arguments") or "{}"
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            parsed = arguments  # kept as written: the format's check says what is wrong with it
        return json.dumps({"name": _get(function, "name"), "arguments": parsed}, ensure_ascii=False)
    return str(_get(message, "content") or "")


def grammar_of(fmt: AnswerFormat) -> str:
    """The EBNF grammar of the answers `fmt` allows."""
    schema = fmt.decoding_schema()
    if schema is not None:
        return _ebnf(json.dumps(_bounded(schema)), text_too=False)
    if fmt.kind == "json_object":
        return _ebnf(json.dumps({"type": "object"}), text_too=False, strict=False)
    return _ebnf(json.dumps(_bounded(fmt.call_schema())), text_too=True)


def _bounded(schema: Any) -> Any:
    """`schema` with every integer that has no bound of its own held to +-SAFE_INTEGER."""
    if isinstance(schema, list):
        return [_bounded(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _bounded(value) for key, value in schema.items()}
    if out.get("type") == "integer":
        out.setdefault("minimum", -SAFE_INTEGER)
        out.setdefault("maximum", SAFE_INTEGER)
    return out


@lru_cache(maxsize=256)
def _ebnf(schema: str, *, text_too: bool, strict: bool = True) -> str:
    # Strict: an object whose schema does not say `additionalProperties` gets none beyond those it
    # lists (a schema still allows them, so the answer conforms either way; a small model rambles less).
    import xgrammar as xgr

    grammar = xgr.Grammar.from_json_schema(schema, any_whitespace=False, strict_mode=strict)
    if text_too:
        grammar = xgr.Grammar.union(grammar, xgr.Grammar.from_regex(_TEXT))
    return str(grammar)


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
