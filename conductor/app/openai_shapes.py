"""A finished job in OpenAI's chat-completion shape (used by the chat route and by batch output files)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from conductor.app.read_models import Usage
from conductor.domain.answer_format import Answer, AnswerFormat, TextAnswer, ToolCall
from conductor.domain.states import JobStatus
from conductor.store.models import Chain, Job, Round


def job_workflows(s: Session, job_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The workflows of each job's top-level rounds, in order (one query for many jobs)."""
    rows = s.execute(
        select(Round.job_id, Round.workflow)
        .join(Chain, Chain.id == Round.chain_id)
        .where(Round.job_id.in_(job_ids), Chain.parent_step_id.is_(None), Round.workflow.is_not(None))
        .order_by(Round.id)
    ).all()
    out: dict[str, list[dict[str, Any]]] = {j: [] for j in job_ids}
    for job_id, workflow in rows:
        out[job_id].append(workflow)
    return out


def chat_completion(job: Job, workflows: list[dict[str, Any]], model: str) -> dict[str, Any]:
    """The chat completion a done (or budget-stopped) job answers with; usage sums every model call."""
    created = int((job.finished_at or job.created_at).timestamp()) if (job.finished_at or job.created_at) else 0
    return {
        "id": f"chatcmpl-{job.id}",
        "object": "chat.completion",
        "created": created or int(time.time()),
        "model": model,
        "choices": [{"index": 0, **chat_message(job), "logprobs": None}],
        "usage": Usage.of(job).openai(),
        "conductor": conductor_info(job, workflows),
    }


def answer_of(job: Job) -> Answer:
    """The job's answer in the shape the client asked for; AnswerFormatError where it is not one (a
    budget-stopped job's partial answer, or a nested workflow's), so no such answer leaves as a success.

    With `stop` the text ends before the first stop sequence, as OpenAI's does (the stored answer stays
    whole: the jobs API and the explorer show what the workflow wrote). The cut comes before the format's
    check: a stop sequence inside a JSON answer makes it fail, as a model stopped there would."""
    options = job.options or {}
    text = cut_at_stop(job.answer or "", options.get("stop") or [])
    fmt = options.get("answer_format")
    return AnswerFormat.from_options(fmt).check(text) if fmt else TextAnswer(text)


def cut_at_stop(text: str, stops: list[str]) -> str:
    """`text` up to the earliest of the stop sequences found in it (all of it where none is)."""
    found = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return text[: min(found)] if found else text


def call_id(job: Job) -> str:
    """The id of the function call a job's answer is: the client's tool message names it."""
    return f"call_{job.id}"


def chat_message(job: Job) -> dict[str, Any]:
    """`message` and `finish_reason` of a done (or budget-stopped) job's chat completion choice."""
    answer = answer_of(job)
    if isinstance(answer, ToolCall):
        function = {"name": answer.name, "arguments": answer.arguments_json}
        call = {"id": call_id(job), "type": "function", "function": function}
        return {"message": {"role": "assistant", "content": None, "tool_calls": [call]}, "finish_reason": "tool_calls"}
    finish = "length" if job.status == JobStatus.BUDGET_EXCEEDED.value else "stop"
    return {"message": {"role": "assistant", "content": answer.text}, "finish_reason": finish}


def batch_usage(s: Session, batch_id: str) -> dict[str, Any]:
    """A batch's usage in OpenAI's shape (every model call of its jobs), with its USD and call count."""
    prompt, completion, cost, calls = s.execute(
        select(
            func.coalesce(func.sum(Job.prompt_tokens), 0),
            func.coalesce(func.sum(Job.completion_tokens), 0),
            func.coalesce(func.sum(Job.cost_usd), 0.0),
            func.coalesce(func.sum(Job.model_calls), 0),
        ).where(Job.batch_id == batch_id)
    ).one()
    return {
        "input_tokens": int(prompt),
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": int(completion),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(prompt + completion),
        "cost_usd": round(float(cost), 8),
        "model_calls": int(calls),
    }


def conductor_info(job: Job, workflows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "status": job.status,
        "workflows": workflows,
        "rounds": len(workflows),
        "model_calls": job.model_calls,
        "cost_usd": round(job.cost_usd, 8),
    }
