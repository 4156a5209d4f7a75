"""The Service seen through one tenant: its jobs and responses, submitted after its quota check, read,
cancelled and given feedback; chat conversations as jobs; cursor pagination. Another tenant's records
are simply not found. The HTTP API's routes call this; it holds no HTTP notions."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import Select, and_, or_, select
from sqlalchemy.orm import Session, sessionmaker

from conductor.app import responses
from conductor.app.outbound import check_url, destinations
from conductor.app.read_models import JobDetail, JobSummary
from conductor.app.responses import Pin
from conductor.app.service import JobSpec, Service
from conductor.app.tenants import check_quota, owned
from conductor.domain.answer_format import AnswerFormat
from conductor.domain.errors import Conflict, InputError, NotFound
from conductor.domain.problem import Problem
from conductor.domain.states import TERMINAL_JOB_VALUES
from conductor.domain.usage import MAX_TOKEN_COUNT
from conductor.engine.cancel import cancel_jobs
from conductor.store.models import Chain, Job, Reward, Round

#: Stores a user's judgement of a job's answer (job id, value) as a reward: the reward pipeline's
#: `record_feedback`, passed in by the composition root.
RecordFeedback = Callable[[str, Any], Reward]


T = TypeVar("T")


@dataclass
class JobPage(Generic[T]):
    jobs: list[T]
    next_cursor: str | None


def conversation_question(messages: list[dict[str, Any]]) -> str:
    """A chat conversation as one question: the last user turn, with the earlier turns as context.
    A conversation may also end with the results of the function calls the assistant made: the
    question is then the user's last message, answered with them."""
    turns = [(m.get("role", "user"), _turn_text(m)) for m in messages]
    turns = [(role, text) for role, text in turns if text.strip()]
    if not turns or turns[-1][0] not in ("user", "tool"):
        raise InputError("the conversation must end with a non-empty user message (or tool results)")
    if len(turns) == 1:
        return turns[0][1]
    if turns[-1][0] == "tool":
        last_user = next((text for role, text in reversed(turns) if role == "user"), None)
        if last_user is None:
            raise InputError("the conversation has tool results but no user message")
        context = "\n\n".join(f"[{role}]\n{text}" for role, text in turns)
        return (
            f"Conversation so far:\n\n{context}\n\nUsing the tool results, answer the user's last message:\n{last_user}"
        )
    context = "\n\n".join(f"[{role}]\n{text}" for role, text in turns[:-1])
    return f"Conversation so far:\n\n{context}\n\nAnswer the user's last message:\n{turns[-1][1]}"


def _turn_text(message: dict[str, Any]) -> str:
    """A turn's text; an assistant's function calls and a tool's result say which call they are."""
    text = _text(message.get("content"))
    calls = [c.get("function") or {} for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    made = [f"called {f.get('name')}({f.get('arguments') or '{}'})" for f in calls]
    if message.get("role") == "tool":
        return f"result of call {message.get('tool_call_id') or '?'}:\n{text}"
    return "\n".join([text, *made]).strip()


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: keep the text ones
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


class TenantJobs:
    """The Service, scoped to tenants."""

    def __init__(self, service: Service, record_feedback: RecordFeedback) -> None:
        self.service = service
        self.sessions = service.sessions
        self.record_feedback = record_feedback

    # -- submit ------------------------------------------------------------------------------
    def submit(self, tenant_id: str, problem: Problem, spec: JobSpec = JobSpec()) -> tuple[str, bool]:
        """A job for the tenant (whatever tenant `spec` names) after its quota check; a repeated
        idempotency key returns the first job."""
        spec = replace(spec, tenant_id=tenant_id)
        key = spec.idempotency_key
        if key is not None and (first := self.service.job_for_key(tenant_id, key)) is not None:
            return first, False  # before the quota check: a retry of an accepted request is never refused
        if spec.webhook_url:
            check_url(spec.webhook_url, destinations(self.service.settings))  # 400 before anything is written
        check_quota(self.sessions, tenant_id)
        # Through the feeder: the job waits its turn (tenant fair share, priority, in-flight cap).
        return self.service.submit(problem, spec, via_feeder=True)

    def submit_chat(
        self,
        tenant_id: str,
        messages: list[dict[str, Any]],
        *,
        model: str,
        max_tokens: int | None = None,
        effort: str | None = None,
        max_usd: float | None = None,
        answer_format: AnswerFormat | None = None,
        stop: list[str] | None = None,
    ) -> str:
        question = conversation_question(messages)
        options: dict[str, Any] = {"api": "chat", "model": model}
        if answer_format is not None:
            options["answer_format"] = answer_format.to_options()
        if stop:
            options["stop"] = stop
        # Interactive work goes ahead of batch work (priority 9 vs the default 5).
        spec = JobSpec(
            priority=9,
            options=options,
            budget_tokens=None if max_tokens is None else min(max(max_tokens * 20, 2000), MAX_TOKEN_COUNT),
        ).with_knob(effort, max_usd)
        job_id, _ = self.submit(tenant_id, Problem(question=question, kind="text"), spec)
        return job_id

    def submit_response(
        self,
        tenant_id: str,
        messages: list[dict[str, Any]],
        pin: Pin,
        *,
        background: bool,
        instructions: str | None,
        metadata: dict[str, str] | None,
        effort: str | None = None,
        max_usd: float | None = None,
        answer_format: AnswerFormat | None = None,
    ) -> str:
        """A Responses API request as a job; background work yields to interactive requests."""
        options: dict[str, Any] = {"api": responses.API, "model": pin.model, "background": background}
        options.update(instructions=instructions, metadata=metadata or {})
        if answer_format is not None:
            options["answer_format"] = answer_format.to_options()
        if pin.policy is not None:
            options["policy"] = pin.policy
        spec = JobSpec(priority=5 if background else 9, options=options).with_knob(effort, max_usd)
        job_id, _ = self.submit(tenant_id, Problem(question=conversation_question(messages), kind="text"), spec)
        return job_id

    def response(self, tenant_id: str, resp_id: str) -> dict[str, Any]:
        with self.sessions() as s:
            return responses.response_object(s, self._own_response(s, tenant_id, resp_id))

    def cancel_response(self, tenant_id: str, resp_id: str) -> dict[str, Any]:
        with self.sessions() as s:
            job = self._own_response(s, tenant_id, resp_id)
            status = responses.STATUS[str(job.status)]
        if status in responses.ENDED and status != "cancelled":
            raise Conflict(f"response {resp_id} is already {status}; only a queued or in-progress one can be cancelled")
        cancel_jobs(self.sessions, [job.id])
        return self.response(tenant_id, resp_id)

    def _own_response(self, s: Session, tenant_id: str, resp_id: str) -> Job:
        job = s.get(Job, responses.job_id_of(resp_id))
        if job is None or job.tenant_id != tenant_id or (job.options or {}).get("api") != responses.API:
            raise NotFound(f"no response {resp_id}")
        return job

    # -- read --------------------------------------------------------------------------------
    def _own(self, tenant_id: str, job_id: str) -> Job:
        with self.sessions() as s:
            return owned(s, Job, job_id, tenant_id, "job")

    def job(self, tenant_id: str, job_id: str) -> JobDetail:
        self._own(tenant_id, job_id)
        return self.service.job_detail(job_id)

    def progress(self, tenant_id: str, job_id: str) -> dict[str, Any]:
        """A cheap poll: status plus how far the workflow has got (for streaming)."""
        job = self._own(tenant_id, job_id)
        with self.sessions() as s:
            rounds = s.execute(
                select(Round.round_index, Round.kind, Round.status, Round.n_steps, Round.steps_done)
                .join(Chain, Chain.id == Round.chain_id)
                .where(Round.job_id == job_id, Chain.parent_step_id.is_(None))
                .order_by(Round.id)
            ).all()
        return {
            "status": job.status,
            "terminal": job.status in TERMINAL_JOB_VALUES,
            "rounds": [
                {"index": r[0], "kind": r[1], "status": r[2], "steps": r[3], "steps_done": r[4]} for r in rounds
            ],
        }

    def list_jobs(
        self,
        tenant_id: str,
        *,
        status: str | None = None,
        batch_id: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> JobPage[JobSummary]:
        """Newest first; `cursor` is the opaque `next_cursor` of the previous page."""
        # Exploration jobs carry the tenant (isolation, judging) but are training's, not the tenant's.
        q = select(Job).where(Job.tenant_id == tenant_id, Job.explore_of.is_(None))
        if status is not None:
            q = q.where(Job.status == status)
        if batch_id is not None:
            q = q.where(Job.batch_id == batch_id)
        return page_of_jobs(self.sessions, q, JobSummary.of, limit=limit, cursor=cursor)

    # -- change ------------------------------------------------------------------------------
    def cancel(self, tenant_id: str, job_id: str) -> JobDetail:
        self._own(tenant_id, job_id)
        cancel_jobs(self.sessions, [job_id])
        return self.job(tenant_id, job_id)

    def feedback(self, tenant_id: str, job_id: str, value: Any) -> dict[str, Any]:
        self._own(tenant_id, job_id)
        row = self.record_feedback(job_id, value)
        return {"job_id": job_id, "reward": row.value, "correct": row.correct, "source": row.source}


def page_of_jobs(
    sessions: sessionmaker[Session],
    q: Select[Any],
    view: Callable[[Job], T],
    *,
    limit: int,
    cursor: str | None,
) -> JobPage[T]:
    """One page of the jobs `q` selects, newest first; `cursor` is the previous page's `next_cursor`."""
    if cursor:
        at, last_id = decode_cursor(cursor)
        q = q.where(or_(Job.created_at < at, and_(Job.created_at == at, Job.id < last_id)))
    q = q.order_by(Job.created_at.desc(), Job.id.desc()).limit(limit + 1)
    with sessions() as s:
        rows: list[Job] = list(s.scalars(q))
        page = rows[:limit]
        views = [view(j) for j in page]
    more = len(rows) > limit
    return JobPage(views, encode_cursor(page[-1].created_at, page[-1].id) if more and page else None)


def encode_cursor(at: datetime, job_id: str) -> str:
    return base64.urlsafe_b64encode(f"{at.isoformat()}|{job_id}".encode()).decode()


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        at, job_id = base64.urlsafe_b64decode(cursor.encode()).decode().split("|", 1)
        return datetime.fromisoformat(at), job_id
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError("invalid cursor") from exc
