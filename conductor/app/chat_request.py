"""The OpenAI chat completion request as this system reads it: the chat route's body and each Batch API
line's `body` alike, so a line's `response_format`, `tools` and `tool_choice` mean what they mean on the
route, and a field that would change the answer and cannot be honoured is refused by name on both."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from conductor.app.openai_formats import (
    ChatTool,
    ResponseFormat,
    chat_functions,
    combine,
    refuse,
    tool_choice_name,
)
from conductor.domain.answer_format import AnswerFormat
from conductor.domain.errors import InputError
from conductor.domain.usage import MAX_TOKEN_COUNT


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls...: accepted, unused

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


#: OpenAI's limit on stop sequences.
MAX_STOP = 4
#: Fields that would change what the answer is, which the Conductor cannot honour: a 400 names them.
REFUSED = {
    "logprobs": "the answer is written by a workflow of several models; no one model's logprobs describe it",
    "top_logprobs": "the answer is written by a workflow of several models; no one model's logprobs describe it",
    "functions": "the deprecated functions field is not supported: send tools",
    "function_call": "the deprecated function_call field is not supported: send tool_choice",
    "audio": "only text answers are supported",
    "modalities": "only text answers are supported",
    "prediction": "predicted outputs are not supported",
    "web_search_options": "web search is not supported",
    "logit_bias": "the answer is written by a workflow of models and tools; no one token bias applies to it",
}
#: Sampling and bookkeeping knobs OpenAI clients send: accepted and ignored (the Conductor and the pool
#: own sampling); an answer made under other settings is still an answer to the request. (`stop` is
#: honoured: the answer is cut before the first stop sequence, `openai_shapes.answer_of`.)
KNOBS = frozenset(
    {
        "temperature",
        "top_p",
        "seed",
        "user",
        "metadata",
        "store",
        "service_tier",
        "frequency_penalty",
        "presence_penalty",
        "parallel_tool_calls",
        "prompt_cache_key",
        "safety_identifier",
        "verbosity",
    }
)


class ChatCompletionRequest(BaseModel):
    # Unknown fields are kept to be refused by name (`answer_format`): pydantic's own message for an
    # extra field names it too, but a knob (temperature, ...) must pass.
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKEN_COUNT)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKEN_COUNT)
    n: int = Field(1, ge=1)
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    max_usd: float | None = Field(None, gt=0, description="Conductor extension: the maximum USD for this problem.")
    response_format: ResponseFormat | None = None
    tools: list[ChatTool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    #: OpenAI's `stop` (a string or a list), read as a list: empty for none.
    stop: list[str] = Field(default_factory=list)

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_as_list(cls, value: Any) -> list[str]:
        if value is None:
            return []
        stops = [value] if isinstance(value, str) else value
        if not isinstance(stops, list) or len(stops) > MAX_STOP or not all(isinstance(x, str) and x for x in stops):
            raise ValueError(f"stop takes up to {MAX_STOP} non-empty strings")
        return stops

    def answer_format(self) -> AnswerFormat | None:
        """The format the final answer must have; 400 for a field this API cannot honour."""
        refuse(self.model_extra or {}, REFUSED, KNOBS)
        if self.n > 1:
            raise InputError("n > 1 is not supported: one request is one job with one answer", param="n")
        shape = self.response_format.answer_format() if self.response_format else None
        functions = chat_functions(self.tools or [])
        if self.tool_choice not in (None, "none", "auto") and not functions:
            raise InputError(f"tool_choice {self.tool_choice!r} needs tools", param="tool_choice")
        return combine(shape, functions, tool_choice_name(self.tool_choice, "tool_choice"))


#: A Batch API line's body may also spell the effort as the Responses API does (see `conductor.domain.effort`).
BATCH_LINE_EXTRAS = frozenset({"reasoning"})


def batch_line_request(body: dict[str, Any]) -> ChatCompletionRequest:
    """A Batch API line's `body` read as the chat route reads its request (`answer_format()` then gives the
    format its answer must have), or an InputError naming the field (`body.response_format.type: ...`). A
    line without a `model` asks for `conductor`."""
    fields = {"model": "conductor", **{k: v for k, v in body.items() if k not in BATCH_LINE_EXTRAS}}
    try:
        return ChatCompletionRequest.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InputError(f"body.{where}: {first['msg']}") from exc
