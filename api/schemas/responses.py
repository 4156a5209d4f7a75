"""OpenAI Responses API request (the fields Conductor honours; sampling knobs are accepted and ignored,
as in chat completions: the Conductor and the pool own sampling; fields that would change the answer
and cannot be honoured are refused by name)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import Reasoning
from conductor.app.openai_formats import (
    ResponseTool,
    TextOptions,
    combine,
    refuse,
    response_functions,
    tool_choice_name,
)
from conductor.domain.answer_format import AnswerFormat
from conductor.domain.errors import InputError

REFUSED = {
    "previous_response_id": "send the whole conversation as input",
    "conversation": "send the whole conversation as input",
    "prompt": "prompt templates are not supported: send input and instructions",
    "top_logprobs": "the answer is written by a workflow of several models; no one model's logprobs describe it",
    "include": "no extra output data (logprobs, reasoning, tool outputs) is produced",
}
KNOBS = frozenset(
    {
        "temperature",
        "top_p",
        "max_output_tokens",
        "max_tool_calls",
        "parallel_tool_calls",
        "service_tier",
        "truncation",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "stream_options",
    }
)


class ResponseCreate(BaseModel):
    model_config = ConfigDict(extra="allow")  # kept to be refused by name, or accepted as a knob

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = Field(None, max_length=100_000)
    metadata: dict[str, str] | None = Field(None, max_length=16)
    stream: bool = False
    background: bool = False
    store: bool = True
    reasoning: Reasoning | None = None
    max_usd: float | None = Field(None, gt=0, description="Conductor extension: the maximum USD for this problem.")
    text: TextOptions | None = None
    tools: list[ResponseTool] | None = None
    tool_choice: str | dict[str, Any] | None = None

    def answer_format(self) -> AnswerFormat | None:
        """The format the final answer must have; 400 for a field this API cannot honour."""
        refuse(self.model_extra or {}, REFUSED, KNOBS)
        shape = self.text.format.answer_format() if self.text and self.text.format else None
        functions = response_functions(self.tools or [])
        if self.tool_choice not in (None, "none", "auto") and not functions:
            raise InputError(f"tool_choice {self.tool_choice!r} needs tools", param="tool_choice")
        return combine(shape, functions, tool_choice_name(self.tool_choice, "tool_choice"))
