"""OpenAI Responses API request (the fields Conductor honours; sampling knobs are accepted and ignored,
as in chat completions: the Conductor and the pool own sampling)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from api.schemas.common import Reasoning


class ResponseCreate(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]]
    instructions: str | None = Field(None, max_length=100_000)
    metadata: dict[str, str] | None = Field(None, max_length=16)
    stream: bool = False
    background: bool = False
    store: bool = True
    reasoning: Reasoning | None = None
    max_usd: float | None = Field(None, gt=0, description="Conductor extension: the maximum USD for this problem.")
