"""OpenAI chat completion request (read in `conductor.app.chat_request`, which Batch API lines share) and
response (plus the `conductor` extension field)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from api.schemas.common import Usage
from conductor.app.chat_request import ChatCompletionRequest


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


__all__ = ["ChatCompletion", "ChatCompletionRequest"]
