"""The Responses API: POST /v1/responses (blocking, streamed, or `background: true`), GET
/v1/responses/{id} (or its stream again, resumed with `starting_after`), POST .../cancel.
A response is a job: a client that goes away loses nothing, and the job is also /v1/jobs/{job id}."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from api.deps import Api, ChatCaller
from api.errors import error_body
from api.routes.models import model_names
from api.schemas.common import ErrorResponse
from api.schemas.responses import ResponseCreate
from conductor.app import responses
from conductor.app.tenant_jobs import TenantJobs
from conductor.domain.errors import InputError

router = APIRouter(prefix="/v1/responses", tags=["responses"], responses={404: {"model": ErrorResponse}})
POLL_S = 0.1
SSE = {"Cache-Control": "no-cache"}


@router.post("", responses={200: {"content": {"text/event-stream": {}}}, 400: {"model": ErrorResponse}})
async def create_response(body: ResponseCreate, request: Request, api: Api, who: ChatCaller) -> Any:
    if not body.store:
        raise InputError("store: false is not supported: every response is a stored job")
    answer_format = body.answer_format()  # 400 before anything is written
    messages = responses.input_messages(body.input, body.instructions)
    with api.sessions() as s:
        pin = responses.resolve_model(s, body.model, model_names(request))
    job_id = await asyncio.to_thread(
        api.submit_response,
        who.tenant_id,
        messages,
        pin,
        background=body.background,
        instructions=body.instructions,
        metadata=body.metadata,
        effort=body.reasoning.effort if body.reasoning else None,
        max_usd=body.max_usd,
        answer_format=answer_format,
    )
    resp_id = responses.response_id(job_id)
    if body.stream:
        return StreamingResponse(
            _events(api, request, who.tenant_id, resp_id, -1), media_type="text/event-stream", headers=SSE
        )
    if body.background:
        return await asyncio.to_thread(api.response, who.tenant_id, resp_id)
    while (current := await asyncio.to_thread(api.response, who.tenant_id, resp_id))["status"] not in responses.ENDED:
        if await request.is_disconnected():
            return JSONResponse({}, status_code=499)  # nobody listens; the job runs on
        await asyncio.sleep(POLL_S)
    if answer_format is not None and current["status"] == "failed":
        # A client that asked for a format is told by status, not by an object it must inspect.
        message = (current["error"] or {}).get("message") or "the response failed"
        return JSONResponse(error_body(message, "server_error", code=current["error"]["code"]), status_code=502)
    return current


@router.get("/{resp_id}", responses={200: {"content": {"text/event-stream": {}}}, 400: {"model": ErrorResponse}})
async def get_response(
    resp_id: str,
    request: Request,
    api: Api,
    who: ChatCaller,
    stream: bool = False,
    starting_after: Annotated[int | None, Query(ge=-1)] = None,
) -> Any:
    current = await asyncio.to_thread(api.response, who.tenant_id, resp_id)  # 404 for unknown or foreign ids
    if not stream:
        if starting_after is not None:
            raise InputError("starting_after only applies with stream=true")
        return current
    after = -1 if starting_after is None else starting_after
    if current["status"] in responses.ENDED:
        last = len(responses.stream_events(responses.as_created(current), current)) - 1
        if after >= last:
            raise InputError(
                f"starting_after={after} is past the end of this stream: its last sequence_number is {last}"
            )
    return StreamingResponse(
        _events(api, request, who.tenant_id, resp_id, after), media_type="text/event-stream", headers=SSE
    )


@router.post("/{resp_id}/cancel", responses={409: {"model": ErrorResponse}})
def cancel_response(resp_id: str, api: Api, who: ChatCaller) -> Any:
    return api.cancel_response(who.tenant_id, resp_id)


async def _events(api: TenantJobs, request: Request, tenant_id: str, resp_id: str, after: int) -> AsyncIterator[str]:
    """The stream's events after `after`, as they become true; ends with the closing event."""
    sent = after
    while True:
        current = await asyncio.to_thread(api.response, tenant_id, resp_id)
        ended = current["status"] in responses.ENDED
        events = responses.stream_events(responses.as_created(current), current if ended else None)
        if not ended and current["status"] == "queued":
            events = events[:1]  # in_progress is sent once the job is
        for event in events[sent + 1 :]:
            yield f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
            sent = event["sequence_number"]
        if ended:
            if sent < after:  # resumed past an end that was not known when the stream was asked for
                body = {"type": "error", "code": "invalid_request_error", "sequence_number": sent + 1}
                yield f"event: error\ndata: {json.dumps({**body, 'message': f'starting_after={after} is past the end'})}\n\n"
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(POLL_S)
