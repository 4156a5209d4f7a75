"""Shapes shared by every resource: OpenAI's error body and list envelope, token usage."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


class Reasoning(BaseModel):
    """OpenAI's `reasoning` object; only the effort is read (see `conductor.domain.effort`)."""

    model_config = ConfigDict(extra="allow")

    effort: Literal["low", "medium", "high"] | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "conductor"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
