"""OpenAI's answer-shaping request fields (`response_format`, `text.format`, `tools`, `tool_choice`) read
into the one `AnswerFormat` a job carries, and the fields that would change the answer in ways this
API cannot honour, refused by name instead of ignored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from conductor.domain.answer_format import AnswerFormat, Function
from conductor.domain.errors import InputError


class JsonSchemaSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field("answer", min_length=1, max_length=64)
    description: str | None = None
    json_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"}, alias="schema")
    strict: bool | None = False


class ResponseFormat(BaseModel):
    """Chat's `response_format`: {"type": "text" | "json_object"} or {"type": "json_schema", "json_schema": {...}}."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = None

    def answer_format(self) -> AnswerFormat | None:
        if self.type == "json_schema":
            if self.json_schema is None:
                raise InputError(
                    "response_format.json_schema is required when its type is json_schema",
                    param="response_format.json_schema",
                )
            spec = self.json_schema
            return AnswerFormat.json_schema(spec.json_schema, name=spec.name, strict=bool(spec.strict))
        return AnswerFormat.json_object() if self.type == "json_object" else None


class TextFormat(BaseModel):
    """The Responses API's `text.format`: the same choices, the schema's fields inline."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str = Field("answer", min_length=1, max_length=64)
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = False

    def answer_format(self) -> AnswerFormat | None:
        if self.type == "json_schema":
            if self.json_schema is None:
                raise InputError(
                    "text.format.schema is required when its type is json_schema", param="text.format.schema"
                )
            return AnswerFormat.json_schema(self.json_schema, name=self.name, strict=bool(self.strict))
        return AnswerFormat.json_object() if self.type == "json_object" else None


class TextOptions(BaseModel):
    model_config = ConfigDict(extra="allow")  # verbosity: a knob

    format: TextFormat | None = None


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    def function(self) -> Function:
        params = self.parameters if self.parameters is not None else {"type": "object", "properties": {}}
        return Function(self.name, self.description or "", params)


class ChatTool(BaseModel):
    """Chat's {"type": "function", "function": {...}}; other tool types are refused by name."""

    model_config = ConfigDict(extra="allow")  # another type's own fields: refused with their type

    type: str
    function: FunctionDef | None = None


class ResponseTool(FunctionDef):
    """The Responses API's {"type": "function", "name": ..., "parameters": ...}."""

    model_config = ConfigDict(extra="allow")  # another type's own fields: refused with their type

    type: str
    name: str = ""


def tool_choice_name(choice: Any, field: str) -> str | None:
    """ "auto", "required", a function's name, or None for "none"; 400 for anything else."""
    if choice is None or choice == "auto":
        return "auto"
    if choice in ("none", "required"):
        return None if choice == "none" else "required"
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name") or choice.get("name")
        if isinstance(name, str) and name:
            return name
    raise InputError(f"{field} {choice!r} is not supported: use none, auto, required or one function", param=field)


def chat_functions(tools: list[ChatTool]) -> list[Function]:
    out = []
    for i, tool in enumerate(tools):
        if tool.type != "function" or tool.function is None:
            raise InputError(
                f"tools[{i}]: only function tools are supported, not {tool.type!r}", param=f"tools.{i}.type"
            )
        out.append(tool.function.function())
    return out


def response_functions(tools: list[ResponseTool]) -> list[Function]:
    out = []
    for i, tool in enumerate(tools):
        if tool.type != "function":
            raise InputError(
                f"tools[{i}]: only function tools are supported, not {tool.type!r}", param=f"tools.{i}.type"
            )
        out.append(tool.function())
    return out


def combine(shape: AnswerFormat | None, functions: list[Function], choice: str | None) -> AnswerFormat | None:
    """One format from the requested answer shape and the offered functions."""
    if not functions or choice is None:
        return shape  # no tools, or tool_choice "none": the answer is never a call
    if shape is not None:
        raise InputError(
            "response_format (or text.format) together with tools is not supported: send one of them", param="tools"
        )
    return AnswerFormat.tools(functions, choice)


def refuse(fields: dict[str, Any], refused: dict[str, str], knobs: frozenset[str]) -> None:
    """400 naming the first field that would change the answer and cannot be honoured, or is unknown."""
    for name, value in fields.items():
        if name in refused and value not in (None, False, [], {}, ["text"]):
            raise InputError(f"{name} is not supported: {refused[name]}", param=name)
        if name not in knobs and name not in refused:
            raise InputError(f"unknown field {name!r}", param=name)
