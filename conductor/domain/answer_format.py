"""What a client asked the final answer to be: a JSON object, JSON that a schema describes, or a call
of one of the client's functions (OpenAI's `response_format`, `text.format`, `tools` + `tool_choice`).

A job carries its format (`Job.options["answer_format"]`) to the step that writes its final answer:
that step is decoded under `decoding_schema()` where we serve the worker, asked in the provider's own
terms elsewhere, and its text is held to `check()` before it becomes the answer. A function call is
written as the JSON object `{"name": ..., "arguments": {...}}` (the shape a grammar can force on a
135M model); the API turns it into OpenAI's `tool_calls`. One call per answer: `parallel_tool_calls`
is not honoured beyond that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from conductor.domain.errors import AnswerFormatError, InputError

__all__ = ["Answer", "AnswerFormat", "Function", "JsonAnswer", "TextAnswer", "ToolCall"]

FormatKind = Literal["json_object", "json_schema", "tools"]
#: "auto", "required", or the name of the one function the answer must call.
ToolChoice = str
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True)
class Function:
    """One function the client offers: its arguments are JSON that `parameters` (a JSON Schema) describes."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: dict(EMPTY_PARAMETERS))

    def __post_init__(self) -> None:
        if not self.name or not all(c.isalnum() or c in "_-" for c in self.name) or len(self.name) > 64:
            raise InputError(f"function name {self.name!r} must be 1-64 letters, digits, _ or -")
        _check_schema(self.parameters, f"the parameters of function {self.name!r}")

    def call_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"name": {"const": self.name}, "arguments": self.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }


@dataclass(frozen=True)
class TextAnswer:
    text: str


@dataclass(frozen=True)
class JsonAnswer:
    value: Any
    text: str  #: as the worker wrote it (clients parse it themselves)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)


Answer = TextAnswer | JsonAnswer | ToolCall


@dataclass(frozen=True)
class AnswerFormat:
    """The shape the final answer must have. Build with `json_object`, `json_schema` or `tools`."""

    kind: FormatKind
    schema: dict[str, Any] | None = None  #: json_schema: what the answer must satisfy
    name: str = "answer"  #: json_schema: the schema's name, as the client gave it
    strict: bool = False
    functions: tuple[Function, ...] = ()
    tool_choice: ToolChoice = "auto"

    @classmethod
    def json_object(cls) -> AnswerFormat:
        return cls("json_object")

    @classmethod
    def json_schema(cls, schema: dict[str, Any], *, name: str = "answer", strict: bool = False) -> AnswerFormat:
        _check_schema(schema, f"the schema {name!r}")
        return cls("json_schema", schema=schema, name=name, strict=strict)

    @classmethod
    def tools(cls, functions: list[Function], tool_choice: ToolChoice = "auto") -> AnswerFormat:
        if not functions:
            raise InputError("tools is empty: offer at least one function, or leave tools out")
        names = [f.name for f in functions]
        if len(set(names)) != len(names):
            raise InputError(f"tools names a function twice: {names}")
        if tool_choice not in ("auto", "required") and tool_choice not in names:
            raise InputError(f"tool_choice names {tool_choice!r}, which is not one of the tools {names}")
        return cls("tools", functions=tuple(functions), tool_choice=tool_choice)

    # -- storage -------------------------------------------------------------------------
    def to_options(self) -> dict[str, Any]:
        """As JSON, for `Job.options["answer_format"]`."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.kind == "json_schema":
            out |= {"schema": self.schema, "name": self.name, "strict": self.strict}
        if self.kind == "tools":
            out["functions"] = [
                {"name": f.name, "description": f.description, "parameters": f.parameters} for f in self.functions
            ]
            out["tool_choice"] = self.tool_choice
        return out

    @classmethod
    def from_options(cls, data: dict[str, Any]) -> AnswerFormat:
        kind = data["kind"]
        if kind == "json_schema":
            return cls.json_schema(data["schema"], name=data.get("name", "answer"), strict=bool(data.get("strict")))
        if kind == "tools":
            return cls.tools([Function(**f) for f in data["functions"]], data.get("tool_choice", "auto"))
        return cls.json_object()

    # -- decoding ------------------------------------------------------------------------
    @property
    def calls_only(self) -> bool:
        """The answer must be a function call (no text)."""
        return self.kind == "tools" and self.tool_choice != "auto"

    def callable_functions(self) -> tuple[Function, ...]:
        if self.tool_choice in ("auto", "required"):
            return self.functions
        return tuple(f for f in self.functions if f.name == self.tool_choice)

    def decoding_schema(self) -> dict[str, Any] | None:
        """The JSON Schema a decoder holds the final step to; None where any JSON object will do
        (json_object) or where text is allowed too (tools with tool_choice "auto": see `call_schema`)."""
        if self.kind == "json_schema":
            return self.schema
        if self.kind == "tools" and self.calls_only:
            return self.call_schema()
        return None

    def call_schema(self) -> dict[str, Any]:
        """A call of one of the functions the answer may call."""
        calls = [f.call_schema() for f in self.callable_functions()]
        return calls[0] if len(calls) == 1 else {"anyOf": calls}

    def instruction(self) -> str:
        """What the worker writing the final answer is told, after its subtask."""
        if self.kind == "json_object":
            return "Answer with one JSON object and nothing else."
        if self.kind == "json_schema":
            schema = json.dumps(self.schema, separators=(",", ":"))
            return f"Answer with one JSON value that conforms to this JSON Schema, and nothing else:\n{schema}"
        lines = [
            f"- {f.name}: {' '.join(f.description.split()) or 'no description'}; arguments: "
            f"{json.dumps(f.parameters, separators=(',', ':'))}"
            for f in self.callable_functions()
        ]
        call = 'To call a function, answer only with JSON: {"name": "<function>", "arguments": {...}}.'
        head = "You must call one of these functions." if self.calls_only else "You may call one of these functions."
        tail = "" if self.calls_only else " Otherwise answer in plain text."
        return "\n".join([head, *lines, call + tail])

    # -- checking ------------------------------------------------------------------------
    def check(self, text: str) -> Answer:
        """The answer `text` is, or AnswerFormatError saying why it is not one this format allows."""
        if self.kind == "tools":
            return self._check_call(text)
        value = _parse_json(text)
        if self.kind == "json_object" and not isinstance(value, dict):
            raise AnswerFormatError(f"the answer is JSON but not an object: {text[:200]!r}")
        if self.schema is not None:
            _validate(value, self.schema, f"schema {self.name!r}")
        return JsonAnswer(value, text.strip())

    def _check_call(self, text: str) -> Answer:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        looks_like_call = isinstance(value, dict) and "name" in value
        if not looks_like_call:
            if self.calls_only:
                raise AnswerFormatError(f"a function call was required, the answer is not one: {text[:200]!r}")
            return TextAnswer(text)
        assert isinstance(value, dict)
        by_name = {f.name: f for f in self.callable_functions()}
        function = by_name.get(str(value["name"]))
        if function is None:
            raise AnswerFormatError(f"the answer calls {value['name']!r}, not one of {sorted(by_name)}")
        arguments = value.get("arguments", {})
        if isinstance(arguments, str):  # some providers write the arguments as a JSON string
            arguments = _parse_json(arguments)
        if not isinstance(arguments, dict):
            raise AnswerFormatError(f"the arguments of {function.name!r} are not a JSON object")
        _validate(arguments, function.parameters, f"the parameters of {function.name!r}")
        return ToolCall(function.name, arguments)


def _check_schema(schema: Any, what: str) -> None:
    if not isinstance(schema, dict):
        raise InputError(f"{what} must be a JSON Schema object")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise InputError(f"{what} is not a valid JSON Schema: {exc.message}") from exc


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise AnswerFormatError(f"the answer is not JSON ({exc}): {text[:200]!r}") from exc


def _validate(value: Any, schema: dict[str, Any], what: str) -> None:
    errors = sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "the top level"
        raise AnswerFormatError(f"the answer does not conform to {what}: at {where}: {first.message}")
