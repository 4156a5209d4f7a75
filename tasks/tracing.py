"""The job's trace at the Celery seams: which parent each message carries, a span per task, and the
job and round spans written when the job ends (see `conductor.telemetry` for the ids).

* `message_parents` (the dispatcher's): the parent each message names in its `traceparent` header,
  read from the rows, so a message the reaper re-sends names the same parent as the first one: a
  plan or step its round's span, anything of a whole job (solve, finalize, score) the job's span.
* `work_span`: a plan's or a step's work, under that parent, current while it runs (the gateway's
  model-call spans nest under it), naming what it worked on (job, tenant, worker, policy version,
  step index, access list, cost); a lone step run inline gets its own (`inline_step`).
* `write_job_trace`: after finalize, the job span and one span per round, from the rows.

Nothing here runs while tracing is off: no span is made and the dispatcher has no parents.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from celery import Task
from opentelemetry import trace
from opentelemetry.trace import SpanContext, Status, StatusCode
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from conductor import telemetry
from conductor.domain.effects import Effects
from conductor.domain.states import TERMINAL_JOB, JobStatus
from conductor.store.models import Job, Round, Step
from tasks.names import TaskName

__all__ = [
    "MessageParents",
    "inline_step",
    "job_open",
    "message_parent",
    "message_parents",
    "work_span",
    "write_job_trace",
]

#: task id ("step-12") -> the span context its message names as parent.
MessageParents = Callable[[Effects], dict[str, SpanContext]]

#: The tasks whose argument is a round id, and a step id.
_ROUND_TASKS = {TaskName.PLAN.value, TaskName.REPLAN.value}
_STEP_TASKS = {TaskName.RUN_STEP.value}


def message_parents(sessions: sessionmaker[Session]) -> MessageParents:
    """The dispatcher's lookup: one query per kind of work in the Effects being sent."""

    def parents(eff: Effects) -> dict[str, SpanContext]:
        out: dict[str, SpanContext] = {}
        rounds = [*eff.plans, *eff.replans]
        jobs = [*eff.solve, *eff.finalize, *eff.score]
        with sessions() as s:
            if rounds:
                rows = s.execute(
                    select(Round.id, Job.traceparent).join(Job, Job.id == Round.job_id).where(Round.id.in_(rounds))
                )
                for round_id, tp in rows:
                    job = telemetry.parse_traceparent(tp)
                    if job is not None:
                        ctx = telemetry.round_context(job, round_id)
                        out[f"plan-{round_id}"] = out[f"replan-{round_id}"] = ctx
            if eff.steps:
                step_rows = s.execute(
                    select(Step.id, Step.round_id, Job.traceparent)
                    .join(Job, Job.id == Step.job_id)
                    .where(Step.id.in_(eff.steps))
                )
                for step_id, round_id, tp in step_rows:
                    job = telemetry.parse_traceparent(tp)
                    if job is not None:
                        out[f"step-{step_id}"] = telemetry.round_context(job, round_id)
            if jobs:
                for job_id, tp in s.execute(select(Job.id, Job.traceparent).where(Job.id.in_(jobs))):
                    job = telemetry.parse_traceparent(tp)
                    if job is not None:
                        for prefix in ("solve", "finalize", "score"):
                            out[f"{prefix}-{job_id}"] = job
        return out

    return parents


# -- a span per piece of work -----------------------------------------------------------------


def message_parent(task: Task) -> SpanContext | None:
    """The parent span the message that brought `task` names (its `traceparent` header)."""
    # Celery puts a message's custom headers on the request (protocol 2); older paths keep them apart.
    value = getattr(task.request, "traceparent", None)
    headers = getattr(task.request, "headers", None) or {}
    return telemetry.parse_traceparent(value or headers.get("traceparent"))


@contextlib.contextmanager
def work_span(sessions: sessionmaker[Session], name: str, key: int, parent: SpanContext | None) -> Iterator[None]:
    """A span around one plan's or one step's work, current while it runs (the gateway's model-call
    spans nest under it), naming what it worked on once done. It ends before the task sends what
    became runnable or runs a lone successor inline, so a host that dies later loses no parent of a
    span it already exported. Nothing at all while tracing is off."""
    if not telemetry.enabled():
        yield
        return
    span = telemetry.tracer().start_span(name, context=telemetry.context_of(parent))
    try:
        with trace.use_span(span, end_on_exit=False, record_exception=True, set_status_on_exception=True):
            yield
    finally:
        span.set_attributes(_attributes(sessions, name, key))
        span.end()


def inline_step(sessions: sessionmaker[Session], step_id: int) -> contextlib.AbstractContextManager[None]:
    """A lone successor run in the finishing task's thread: under its round's span, like a step a message brought."""
    if not telemetry.enabled():
        return contextlib.nullcontext()
    parent = message_parents(sessions)(Effects(steps=[step_id])).get(f"step-{step_id}")
    return work_span(sessions, TaskName.RUN_STEP.value, step_id, parent)


def step_attributes(s: Session, step_id: int) -> dict[str, Any]:
    """What a step span says about its step (never its subtask or output)."""
    row = s.execute(
        select(Step, Job.tenant_id, Round.policy_version)
        .join(Job, Job.id == Step.job_id)
        .join(Round, Round.id == Step.round_id)
        .where(Step.id == step_id)
    ).first()
    if row is None:
        return {}
    step, tenant, policy = row
    access = step.access if isinstance(step.access, str) else ",".join(str(a) for a in step.access or [])
    return _clean(
        {
            "conductor.job.id": step.job_id,
            "conductor.tenant.id": tenant,
            "conductor.round.id": step.round_id,
            "conductor.step.id": step.id,
            "conductor.step.index": step.step_index,
            "conductor.step.access": access,
            "conductor.worker.name": step.worker_name,
            "conductor.policy.version": policy,
            "conductor.step.status": str(step.status),
            "conductor.cost_usd": step.cost_usd,
            "gen_ai.usage.input_tokens": step.prompt_tokens,
            "gen_ai.usage.output_tokens": step.completion_tokens,
        }
    )


def _attributes(sessions: sessionmaker[Session], name: str, key: Any) -> dict[str, Any]:
    with sessions() as s:
        if name in _STEP_TASKS:
            return step_attributes(s, int(key))
        if name in _ROUND_TASKS:
            row = s.execute(
                select(Round, Job.tenant_id).join(Job, Job.id == Round.job_id).where(Round.id == int(key))
            ).first()
            return _round_attributes(*row) if row is not None else {}
    return {}


def _round_attributes(r: Round, tenant: str | None) -> dict[str, Any]:
    return _clean(
        {
            "conductor.job.id": r.job_id,
            "conductor.tenant.id": tenant,
            "conductor.round.id": r.id,
            "conductor.round.index": r.round_index,
            "conductor.round.kind": str(r.kind),
            "conductor.round.status": str(r.status),
            "conductor.round.parse_status": str(r.parse_status) if r.parse_status else None,
            "conductor.round.steps": r.n_steps,
            "conductor.policy.version": r.policy_version,
            "conductor.cost_usd": r.cost_usd,
            "gen_ai.usage.input_tokens": r.prompt_tokens,
            "gen_ai.usage.output_tokens": r.completion_tokens,
        }
    )


def _clean(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if v is not None}


# -- the job and round spans ------------------------------------------------------------------


def _ns(at: datetime | None) -> int | None:
    return int(at.timestamp() * 1e9) if at is not None else None


def job_open(sessions: sessionmaker[Session], job_id: str) -> bool:
    """Whether the job has not ended yet: read before finalize, so only the call that ends it writes its trace."""
    with sessions() as s:
        status = s.scalar(select(Job.status).where(Job.id == job_id))
    return status is not None and status not in TERMINAL_JOB


def write_job_trace(sessions: sessionmaker[Session], job_id: str) -> None:
    """The job span (submission to end) and its rounds' spans, with the ids their children carry."""
    with sessions() as s:
        job = s.get(Job, job_id)
        if job is None or job.status not in TERMINAL_JOB:
            return
        ctx = telemetry.parse_traceparent(job.traceparent)
        if ctx is None:
            return
        rounds = s.scalars(select(Round).where(Round.job_id == job_id).order_by(Round.id)).all()
        end = _ns(job.finished_at)
        tracer = telemetry.tracer()
        caller = telemetry.context_of(telemetry.caller_context(ctx, job.trace_caller))
        with telemetry.pinned_ids(ctx):
            span = tracer.start_span("conductor.job", context=caller, start_time=_ns(job.created_at))
        span.set_attributes(
            _clean(
                {
                    "conductor.job.id": job.id,
                    "conductor.tenant.id": job.tenant_id,
                    "conductor.job.status": str(job.status),
                    "conductor.job.samples": job.samples,
                    "conductor.model_calls": job.model_calls,
                    "conductor.cost_usd": job.cost_usd,
                    "gen_ai.usage.input_tokens": job.prompt_tokens,
                    "gen_ai.usage.output_tokens": job.completion_tokens,
                }
            )
        )
        if job.status != JobStatus.DONE:
            span.set_status(Status(StatusCode.ERROR, job.error or str(job.status)))
        job_parent = telemetry.context_of(ctx)
        for r in rounds:
            with telemetry.pinned_ids(telemetry.round_context(ctx, r.id)):
                rs = tracer.start_span(
                    f"conductor.round {r.kind}",
                    context=job_parent,
                    start_time=_ns(r.created_at),
                    attributes=_round_attributes(r, job.tenant_id),
                )
            rs.end(end_time=_ns(r.finished_at) or end)
        span.end(end_time=end)
