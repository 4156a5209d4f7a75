"""Domain errors to HTTP statuses, in OpenAI's error shape. Messages never carry keys or secrets."""

from __future__ import annotations

import logging
from typing import Any

import kombu.exceptions
import redis.exceptions
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from conductor.domain.errors import (
    AnswerFormatError,
    ConductorError,
    ConfigError,
    Conflict,
    InputError,
    NotFound,
    QuotaExceeded,
)

STATUS: list[tuple[type[ConductorError], int, str]] = [
    (NotFound, 404, "not_found_error"),
    (InputError, 400, "invalid_request_error"),
    (Conflict, 409, "invalid_request_error"),
    (QuotaExceeded, 429, "rate_limit_error"),
    (ConfigError, 500, "server_error"),
    # The workers' answer, not the request, is wrong: a gateway error, as for a failed job.
    (AnswerFormatError, 502, "server_error"),
]


log = logging.getLogger(__name__)

#: A link to PostgreSQL or Redis that failed or timed out (a partition, a restart, a full pool):
#: 503 with Retry-After, the client's cue to try again, never a bare 500.
UNAVAILABLE: tuple[type[Exception], ...] = (
    sqlalchemy.exc.OperationalError,  # connect timeout, a connection lost mid-statement (libpq)
    sqlalchemy.exc.InterfaceError,
    sqlalchemy.exc.TimeoutError,  # no pooled connection came free in time
    kombu.exceptions.OperationalError,  # the broker unreachable for a publish
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)
RETRY_AFTER_S = 5


class AuthError(Exception):
    """No key, an unknown, revoked or expired key (401), or a key without the scope (403)."""

    def __init__(self, message: str, status: int = 401) -> None:
        super().__init__(message)
        self.status = status


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def install(app: FastAPI) -> None:
    @app.exception_handler(ConductorError)
    async def _domain(_: Request, exc: ConductorError) -> JSONResponse:
        status, kind = next(((s, k) for t, s, k in STATUS if isinstance(exc, t)), (500, "server_error"))
        headers = {"Retry-After": str(int(exc.retry_after + 0.999))} if isinstance(exc, QuotaExceeded) else None
        param = exc.param if isinstance(exc, InputError) else None
        return JSONResponse(error_body(str(exc), kind, param=param), status_code=status, headers=headers)

    async def _unavailable(request: Request, exc: Exception) -> JSONResponse:
        # The driver's message names hosts and ports: logged here, never sent to the client.
        log.warning("%s %s: a store or broker link failed: %r", request.method, request.url.path, exc)
        return JSONResponse(
            error_body(
                "the service's database or queue did not answer in time; retry the request shortly",
                "server_error",
                code="service_unavailable",
            ),
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )

    for kind in UNAVAILABLE:
        app.add_exception_handler(kind, _unavailable)

    @app.exception_handler(AuthError)
    async def _auth(_: Request, exc: AuthError) -> JSONResponse:
        kind = "authentication_error" if exc.status == 401 else "permission_error"
        return JSONResponse(error_body(str(exc), kind), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        param = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
        return JSONResponse(
            error_body(f"{first.get('msg', 'invalid request')}", "invalid_request_error", param=param),
            status_code=400,
        )

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        code = "too_large" if exc.status_code == 413 else None  # as api.edge answers a declared size
        return JSONResponse(error_body(str(exc.detail), "invalid_request_error", code), status_code=exc.status_code)
