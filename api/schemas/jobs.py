"""Native jobs: a problem in the README's JSONL format with samples, budget, priority and webhook."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

from api.schemas.common import Reasoning
from conductor.domain.problem import Problem
from conductor.domain.usage import MAX_TOKEN_COUNT

#: Every state a job can be in (`waiting`: written, not yet admitted by the feeder).
JobState = Literal["waiting", "queued", "running", "done", "failed", "budget_exceeded", "cancelled"]


class JobCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problem: Problem
    samples: int | None = Field(None, ge=1, le=64)
    priority: int = Field(5, ge=0, le=9, description="0 lowest, 9 highest; chat requests run at 9.")
    budget_tokens: int | None = Field(None, ge=1, le=MAX_TOKEN_COUNT)
    budget_usd: float | None = Field(None, gt=0, description="The maximum USD for this problem.")
    reasoning: Reasoning | None = Field(None, description="effort low / medium / high: steps, replans, samples.")
    webhook_url: AnyHttpUrl | None = None


class JobUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    model_calls: int
    cost_usd: float


class JobSummary(BaseModel):
    id: str
    object: Literal["job"] = "job"
    status: str
    batch_id: str | None
    custom_id: str | None
    priority: int
    answer: str | None
    error: str | None
    usage: JobUsage
    created_at: datetime | None
    finished_at: datetime | None


class JobDetail(JobSummary):
    question: str | None
    workflow: dict[str, Any] | None
    rounds: int
    samples: int
    rewards: list[dict[str, Any]]
    chains: list[dict[str, Any]] = Field(description="Every chain with its rounds and steps.")


class JobList(BaseModel):
    object: Literal["list"] = "list"
    data: list[JobSummary]
    has_more: bool
    next_cursor: str | None


class FeedbackCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    score: float | bool | str = Field(description="A score in [0, 1], a bool, or a thumbs word ('up', 'down', '4/5').")


class FeedbackResult(BaseModel):
    job_id: str
    reward: float
    correct: bool | None
    source: str
