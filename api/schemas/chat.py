"""OpenAI chat completion request and response (plus the `conductor` extension field)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import Usage
from api.schemas.formats import (
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
}
#: Sampling and bookkeeping knobs OpenAI clients send: accepted and ignored (the Conductor and the pool
#: own sampling); an answer made under other settings is still an answer to the request.
KNOBS = frozenset(
    {
        "temperature",
        "top_p",
        "seed",
        "stop",
        "user",
        "metadata",
        "store",
        "service_tier",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
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

    def answer_format(self) -> AnswerFormat | None:
        """The format the final answer must have; 400 for a field this API cannot honour."""
        refuse(self.model_extra or {}, REFUSED, KNOBS)
        if self.n > 1:
            raise InputError("n > 1 is not supported: one request is one job with one answer")
        shape = self.response_format.answer_format() if self.response_format else None
        functions = chat_functions(self.tools or [])
        if self.tool_choice not in (None, "none", "auto") and not functions:
            raise InputError(f"tool_choice {self.tool_choice!r} needs tools")
        return combine(shape, functions, tool_choice_name(self.tool_choice, "tool_choice"))


class FunctionCall(BaseModel):
    name: str
    arguments: str  #: JSON text, as OpenAI writes it


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] | None = None


class Choice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: None = None


class ConductorInfo(BaseModel):
    """What OpenAI's shape cannot carry: the job behind the answer and how it was produced."""

    job_id: str
    status: str
    workflows: list[dict[str, Any]]
    rounds: int
    model_calls: int
    cost_usd: float


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    conductor: ConductorInfo
