"""Native jobs: what OpenAI's shape cannot carry (references, samples, budgets, priority, webhook)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Response

from api.deps import Api, JobsCaller
from api.schemas.common import ErrorResponse
from api.schemas.jobs import (
    FeedbackCreate,
    FeedbackResult,
    JobCreate,
    JobDetail,
    JobList,
    JobState,
    JobSummary,
)
from conductor.app import read_models
from conductor.app.service import JobSpec

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses={404: {"model": ErrorResponse}})


def _summary(job: read_models.JobSummary) -> JobSummary:
    return JobSummary.model_validate(job.to_json())


def _detail(job: read_models.JobDetail) -> JobDetail:
    return JobDetail.model_validate(
        {
            **job.summary.to_json(),
            "question": job.question,
            "workflow": job.line.workflow,
            "rounds": job.line.rounds,
            "samples": job.samples,
            "rewards": job.rewards,
            "chains": job.chains,
        }
    )


@router.post(
    "", response_model=JobDetail, status_code=201, responses={200: {"model": JobDetail}, 429: {"model": ErrorResponse}}
)
def create_job(
    body: JobCreate,
    response: Response,
    api: Api,
    who: JobsCaller,
    idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
) -> JobDetail:
    spec = JobSpec(
        samples=body.samples,
        priority=body.priority,
        budget_tokens=body.budget_tokens,
        budget_usd=body.budget_usd,
        webhook_url=str(body.webhook_url) if body.webhook_url else None,
        idempotency_key=idempotency_key,
    ).with_knob(body.reasoning.effort if body.reasoning else None)
    job_id, created = api.submit(who.tenant_id, body.problem, spec)
    if not created:
        response.status_code = 200  # the job this key already created
    return _detail(api.job(who.tenant_id, job_id))


@router.get("/{job_id}", response_model=JobDetail)
def get_job(job_id: str, api: Api, who: JobsCaller) -> JobDetail:
    return _detail(api.job(who.tenant_id, job_id))


@router.get("", response_model=JobList)
def list_jobs(
    api: Api,
    who: JobsCaller,
    status: JobState | None = None,
    batch_id: Annotated[str | None, Query(max_length=64)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=400)] = None,
) -> JobList:
    page = api.list_jobs(who.tenant_id, status=status, batch_id=batch_id, limit=limit, cursor=cursor)
    return JobList(
        data=[_summary(v) for v in page.jobs], has_more=page.next_cursor is not None, next_cursor=page.next_cursor
    )


@router.post("/{job_id}/cancel", response_model=JobDetail)
def cancel_job(job_id: str, api: Api, who: JobsCaller) -> JobDetail:
    return _detail(api.cancel(who.tenant_id, job_id))


@router.post("/{job_id}/feedback", response_model=FeedbackResult, responses={400: {"model": ErrorResponse}})
def job_feedback(job_id: str, body: FeedbackCreate, api: Api, who: JobsCaller) -> FeedbackResult:
    return FeedbackResult(**api.feedback(who.tenant_id, job_id, body.score))
