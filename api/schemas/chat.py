"""OpenAI chat completion request and response (plus the `conductor` extension field)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import Usage


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")  # name, tool_calls...: accepted, unused

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    # Sampling knobs OpenAI clients send (temperature, top_p, ...) are accepted and ignored:
    # the Conductor and the pool own sampling.
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessageIn] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    n: int = Field(1, ge=1, le=1)
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    max_usd: float | None = Field(None, gt=0, description="Conductor extension: the maximum USD for this problem.")


class ChatMessageOut(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None


class Choice(BaseModel):
    index: int = 0
    message: ChatMessageOut
    finish_reason: Literal["stop", "length"]
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
