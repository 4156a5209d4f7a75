"""Read models: one typed shape per way a job is shown, built from its row, each with the one JSON
spelling every reader gets (the CLI, the HTTP API and its explorer, webhooks, result exports).

- `Usage`: what a job spent. Its JSON (`prompt_tokens`, `completion_tokens`, `total_tokens`,
  `model_calls`, `cost_usd`) is the native API's; `openai()` is the OpenAI chat `usage` object.
- `JobSummary`: a job in a list, and a webhook's `job.*` event (`GET /v1/jobs`, the explorer).
- `ResultLine`: a job as one flat line of `conductor run`'s output (and of a batch's result export).
- `JobDetail`: a job with its chains, rounds, steps and rewards (`conductor status`, `GET /v1/jobs/{id}`).

Money is `cost_usd` everywhere (result lines once said `cost`); times are ISO 8601 strings in JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from conductor.app.views import chain_view, reward_view
from conductor.store import queries
from conductor.store.models import Job


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    model_calls: int
    cost_usd: float
    #: worker answers from the deterministic-call cache: counted in the tokens above, not in the cost
    cache_hits: int = 0
    cached_tokens: int = 0
    saved_usd: float = 0.0

    @classmethod
    def of(cls, job: Job) -> Usage:
        return cls(
            job.prompt_tokens,
            job.completion_tokens,
            job.model_calls,
            round(job.cost_usd, 8),
            job.cache_hits or 0,
            job.cached_tokens or 0,
            round(job.saved_usd or 0.0, 8),
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def openai(self) -> dict[str, int]:
        """OpenAI's chat completion `usage` (tokens only)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

    def to_json(self) -> dict[str, Any]:
        cache = {"hits": self.cache_hits, "tokens": self.cached_tokens, "saved_usd": self.saved_usd}
        return {**self.openai(), "model_calls": self.model_calls, "cost_usd": self.cost_usd, "cache": cache}


@dataclass(frozen=True)
class JobSummary:
    id: str
    status: str
    batch_id: str | None
    custom_id: str | None  #: the problem's own id (`id` of its input line), if it had one
    priority: int
    answer: str | None
    error: str | None
    usage: Usage
    created_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, job: Job) -> JobSummary:
        return cls(
            id=job.id,
            status=str(job.status),
            batch_id=job.batch_id,
            custom_id=job.external_id,
            priority=job.priority,
            answer=job.answer,
            error=job.error,
            usage=Usage.of(job),
            created_at=job.created_at,
            finished_at=job.finished_at,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "job",
            "status": self.status,
            "batch_id": self.batch_id,
            "custom_id": self.custom_id,
            "priority": self.priority,
            "answer": self.answer,
            "error": self.error,
            "usage": self.usage.to_json(),
            "created_at": _iso(self.created_at),
            "finished_at": _iso(self.finished_at),
        }


@dataclass(frozen=True)
class ResultLine:
    id: str  #: the problem's own id, else the job id
    job_id: str
    line: int | None  #: line number in the input file (batch jobs)
    status: str
    answer: str | None
    workflow: dict[str, Any] | None  #: the answering chain's last parsed workflow
    rounds: int
    usage: Usage
    seconds: float | None
    error: str | None

    @classmethod
    def of(cls, job: Job) -> ResultLine:
        """Reads `job.chains` and their rounds' workflows (load them eagerly when streaming many)."""
        chain = next((c for c in job.chains if c.id == job.answer_chain_id), None) or next(
            (c for c in job.chains if c.parent_step_id is None), None
        )
        rounds = chain.rounds if chain else []
        seconds = queries.job_seconds(job)
        return cls(
            id=job.external_id or job.id,
            job_id=job.id,
            line=job.line_no,
            status=str(job.status),
            answer=job.answer,
            workflow=next((r.workflow for r in reversed(rounds) if r.workflow), None),
            rounds=len(rounds),
            usage=Usage.of(job),
            seconds=round(seconds, 3) if seconds is not None else None,
            error=job.error,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "job_id": self.job_id,
            "line": self.line,
            "status": self.status,
            "answer": self.answer,
            "workflow": self.workflow,
            "rounds": self.rounds,
            "tokens": self.usage.total_tokens,
            "cost_usd": self.usage.cost_usd,
            "seconds": self.seconds,
            "error": self.error,
        }


@dataclass(frozen=True)
class JobDetail:
    line: ResultLine
    summary: JobSummary
    question: str | None
    samples: int
    options: dict[str, Any]
    rewards: list[dict[str, Any]]
    chains: list[dict[str, Any]]  #: every chain with its rounds and steps

    @classmethod
    def of(cls, job: Job, s: Session) -> JobDetail:
        return cls(
            line=ResultLine.of(job),
            summary=JobSummary.of(job),
            question=job.problem.get("question"),
            samples=job.samples,
            options=job.options or {},
            rewards=[reward_view(r) for r in queries.job_rewards(s, job.id)],
            chains=[chain_view(c) for c in job.chains],
        )

    @property
    def job_id(self) -> str:
        return self.summary.id

    def to_json(self) -> dict[str, Any]:
        """The result line's keys, then the job's usage spelled out, its rounds and rewards."""
        usage = self.summary.usage
        return {
            **self.line.to_json(),
            "batch_id": self.summary.batch_id,
            "priority": self.summary.priority,
            "options": self.options,
            "question": self.question,
            "samples": self.samples,
            "model_calls": usage.model_calls,
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "created_at": _iso(self.summary.created_at),
            "finished_at": _iso(self.summary.finished_at),
            "rewards": self.rewards,
            "chains": self.chains,
        }
