"""POST /v1/estimates: what a batch of problems will cost before it runs (calls, tokens, USD), at an
effort level, from the pool's prices and recent usage, with the method stated. Nothing is written."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from api.deps import Estimator, JobsCaller
from api.schemas.common import ErrorResponse, Reasoning
from conductor.domain.problem import Problem

router = APIRouter(prefix="/v1/estimates", tags=["estimates"], responses={400: {"model": ErrorResponse}})


class EstimateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problems: list[Problem] = Field(min_length=1, max_length=100_000)
    reasoning: Reasoning | None = None
    samples: int | None = Field(None, ge=1, le=64)


@router.post("")
async def create_estimate(
    body: EstimateRequest, request: Request, estimate: Estimator, _: JobsCaller
) -> dict[str, Any]:
    effort = body.reasoning.effort if body.reasoning else None
    return await asyncio.to_thread(estimate, body.problems, effort=effort, samples=body.samples)
