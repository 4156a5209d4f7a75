"""POST /v1/chat/completions: the conversation becomes a job; the answer comes back as a chat
completion, or streamed as OpenAI chunks (progress as SSE comments, the answer as content deltas).
A client that disconnects loses nothing: the job runs on and is read from /v1/jobs/{id}."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, StreamingResponse

from api.deps import Api, ChatCaller
from api.errors import error_body
from api.routes.models import model_names
from api.schemas.chat import ChatCompletion, ChatCompletionRequest
from api.schemas.common import ErrorResponse
from conductor.app.openai_shapes import answer_of, call_id, chat_completion, conductor_info, job_workflows
from conductor.app.read_models import Usage
from conductor.app.tenant_jobs import TenantJobs
from conductor.domain.answer_format import ToolCall
from conductor.domain.errors import AnswerFormatError, NotFound
from conductor.domain.states import JobStatus
from conductor.store.models import Job

router = APIRouter(prefix="/v1", tags=["chat"])
JOB_HEADER = "x-conductor-job-id"
POLL_S = 0.1
CHUNK_CHARS = 256
ANSWERED = (JobStatus.DONE.value, JobStatus.BUDGET_EXCEEDED.value)


def _finished(api: TenantJobs, job_id: str) -> tuple[Job, list[dict[str, Any]]]:
    with api.sessions() as s:
        job = s.get_one(Job, job_id)
        return job, job_workflows(s, [job_id])[job_id]


@router.post(
    "/chat/completions",
    response_model=ChatCompletion,
    responses={
        200: {"content": {"text/event-stream": {}}},
        404: {"model": ErrorResponse},
        502: {"model": ErrorResponse},
    },
)
async def create_chat_completion(body: ChatCompletionRequest, request: Request, api: Api, who: ChatCaller) -> Any:
    if body.model not in model_names(request):
        raise NotFound(f"the model {body.model!r} does not exist; use one of {model_names(request)}")
    answer_format = body.answer_format()  # 400 before anything is written
    messages = [m.model_dump() for m in body.messages]
    max_tokens = body.max_completion_tokens or body.max_tokens
    job_id = await asyncio.to_thread(
        api.submit_chat,
        who.tenant_id,
        messages,
        model=body.model,
        max_tokens=max_tokens,
        effort=body.reasoning_effort,
        max_usd=body.max_usd,
        answer_format=answer_format,
        stop=body.stop,
    )
    headers = {JOB_HEADER: job_id}
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return StreamingResponse(
            _stream(
                api,
                request,
                who.tenant_id,
                job_id,
                body.model,
                include_usage,
                calls_only=answer_format is not None and answer_format.calls_only,
            ),
            media_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-cache"},
        )
    while True:
        progress = await asyncio.to_thread(api.progress, who.tenant_id, job_id)
        if progress["terminal"]:
            break
        if await request.is_disconnected():
            return JSONResponse({}, status_code=499, headers=headers)  # nobody listens; the job runs on
        await asyncio.sleep(POLL_S)
    job, workflows = await asyncio.to_thread(_finished, api, job_id)
    if job.status not in ANSWERED:
        return JSONResponse(
            error_body(f"job {job_id} ended {job.status}: {job.error}", "server_error", code=f"job_{job.status}"),
            status_code=502,
            headers=headers,
        )
    return JSONResponse(chat_completion(job, workflows, body.model), headers=headers)


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def _stream(
    api: TenantJobs,
    request: Request,
    tenant_id: str,
    job_id: str,
    model: str,
    include_usage: bool,
    *,
    calls_only: bool,
) -> AsyncIterator[str]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        return {
            "id": f"chatcmpl-{job_id}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            **extra,
        }

    # The role chunk leaves before the answer exists: its content is null, as OpenAI streams a call, only
    # where the answer can be nothing else; with tool_choice auto it may still be text.
    opening = {"role": "assistant", "content": None if calls_only else ""}
    yield _sse(chunk(opening, conductor={"job_id": job_id, "status": "queued"}))
    last = None
    while True:
        progress = await asyncio.to_thread(api.progress, tenant_id, job_id)
        note = _progress_note(progress)
        if note != last:
            yield f": {note}\n\n"  # an SSE comment: clients show nothing, proxies keep the line open
            last = note
        if progress["terminal"]:
            break
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
    job, workflows = await asyncio.to_thread(_finished, api, job_id)
    if job.status not in ANSWERED:
        yield _sse(
            error_body(f"job {job_id} ended {job.status}: {job.error}", "server_error", code=f"job_{job.status}")
        )
        return
    try:
        answer = answer_of(job)
    except AnswerFormatError as exc:
        yield _sse(error_body(f"job {job_id}: {exc}", "server_error", code="answer_format"))
        return
    if isinstance(answer, ToolCall):
        # As OpenAI streams a call: its id and name first, then the arguments in pieces.
        call = {"index": 0, "id": call_id(job), "type": "function", "function": {"name": answer.name, "arguments": ""}}
        yield _sse(chunk({"tool_calls": [call]}))
        arguments = answer.arguments_json
        for i in range(0, len(arguments), CHUNK_CHARS):
            yield _sse(chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments[i : i + CHUNK_CHARS]}}]}))
        finish = "tool_calls"
    else:
        for i in range(0, len(answer.text), CHUNK_CHARS):
            yield _sse(chunk({"content": answer.text[i : i + CHUNK_CHARS]}))
        finish = "length" if job.status == JobStatus.BUDGET_EXCEEDED.value else "stop"
    yield _sse(chunk({}, finish, conductor=conductor_info(job, workflows)))
    if include_usage:
        yield _sse({**chunk({}), "choices": [], "usage": Usage.of(job).openai()})
    yield "data: [DONE]\n\n"


def _progress_note(progress: dict[str, Any]) -> str:
    rounds = progress["rounds"]
    if not rounds:
        return f"job {progress['status']}"
    r = rounds[-1]
    return f"job {progress['status']}; round {r['index']} ({r['kind']}) {r['status']}, {r['steps_done']}/{r['steps']} steps"
