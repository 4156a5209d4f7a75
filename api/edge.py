"""What every request must be before a route reads it: its path and query parameters text a store can
hold (400 naming the parameter: PostgreSQL refuses a NUL, `%00`, even in a lookup by id); its body no
larger than its limit (413) and, when it is JSON, text a store can hold (400 naming the field); and it
must keep coming: a client that
goes silent mid-body (a host that vanished, a partition that drops its packets) gets a 408 after
`body_idle_timeout_s` instead of holding a server task and a spooled upload for as long as TCP takes
to notice. One ASGI middleware, so a route added later is covered too.

File uploads have their own, larger limit and are streamed through (never buffered here); other
bodies are read whole, up to their limit, and handed on unchanged.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any
from urllib.parse import parse_qsl

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_body
from conductor.config.settings import Settings
from conductor.domain.text import unstorable

UPLOAD_PATH = "/v1/files"
#: The JSON escapes that spell NUL or a lone surrogate: only a body holding one is parsed here.
_SUSPECT = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


class BodyEdge:
    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (bad := _unstorable_url(scope)):
            await _unstorable_answer(bad)(scope, receive, send)
            return
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        upload = scope["path"].rstrip("/") == UPLOAD_PATH
        limit = self.settings.max_upload_bytes if upload else self.settings.max_body_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(limit, upload)(scope, receive, send)
            return
        idle = self.settings.body_idle_timeout_s
        if upload:
            await self.app(scope, _counting(_idle_limited(receive, idle), limit, upload), send)
            return
        try:
            body = await _read(_idle_limited(receive, idle), limit)
        except HTTPException as exc:  # went silent mid-body: nothing reached the route
            await JSONResponse(error_body(str(exc.detail), "invalid_request_error", code="timeout"), exc.status_code)(
                scope, receive, send
            )
            return
        if body is None:
            await _too_large(limit, upload)(scope, receive, send)
            return
        if bad := _unstorable(body):
            await _unstorable_answer(bad)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


def _unstorable_answer(bad: tuple[str, str]) -> JSONResponse:
    where, what = bad
    message = f"{where} {what}; it cannot be stored"
    return JSONResponse(error_body(message, "invalid_request_error", param=where), status_code=400)


def _unstorable_url(scope: Scope) -> tuple[str, str] | None:
    """The path or first query parameter (`query.batch_id`) holding text no store can hold, decoded as
    the routes will read it (a `%00` is a NUL by then), with what is wrong there; None when all can."""
    if found := unstorable(scope["path"], "path"):
        return found
    query = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
    for name, value in query:
        if found := unstorable({name: value}, "query"):
            return found
    return None


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _too_large(limit: int, upload: bool) -> JSONResponse:
    what = "an upload" if upload else "a request body"
    setting = "CONDUCTOR_MAX_UPLOAD_BYTES" if upload else "CONDUCTOR_MAX_BODY_BYTES"
    return JSONResponse(
        error_body(f"{what} may hold at most {limit} bytes ({setting})", "invalid_request_error", code="too_large"),
        status_code=413,
    )


async def _read(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None past `limit` bytes (a client may not declare its length)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: disconnect, as the server reports it

    return replay


def _idle_limited(receive: Receive, idle_s: float) -> Receive:
    """`receive` that waits at most `idle_s` for each piece of the body, then ends the request in a 408
    (an HTTPException, which the route's form parsing lets through to the app's handler). Once the body
    has ended, waiting is unbounded again: what comes next is the disconnect, whenever it comes."""
    ended = False

    async def limited() -> Message:
        nonlocal ended
        if ended:
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), idle_s)
        except TimeoutError:
            raise HTTPException(
                408, f"the request body stopped arriving for {idle_s:g} s (CONDUCTOR_BODY_IDLE_TIMEOUT_S)"
            ) from None
        ended = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return limited


def _counting(receive: Receive, limit: int, upload: bool) -> Receive:
    """`receive` for a streamed upload: past `limit` bytes the request ends in a 413 (the route's
    form parsing lets an HTTPException through to the app's handler)."""
    size = 0

    async def counted() -> Message:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                setting = "CONDUCTOR_MAX_UPLOAD_BYTES" if upload else "CONDUCTOR_MAX_BODY_BYTES"
                raise HTTPException(413, f"an upload may hold at most {limit} bytes ({setting})")
        return message

    return counted


def _unstorable(body: bytes) -> tuple[str, str] | None:
    if not _SUSPECT.search(body):
        return None  # the common case: no escape that could spell such text, nothing parsed
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        return None  # not JSON: the route says what is wrong with it
    return unstorable(parsed)
