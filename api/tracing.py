"""A server span per HTTP request that continues the caller's trace (W3C `traceparent`).

A pure ASGI middleware, so the span is current in the route's own context (and the threadpool a sync
route runs in): a job submitted while handling the request mints its trace as a child of this span
(`conductor.telemetry.new_job_trace`), and so of the caller's. Only the method, path and status are
recorded; no header, body or key. Nothing is made while tracing is off.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from conductor import telemetry

__all__ = ["TraceRequests"]

_PROPAGATED = (b"traceparent", b"tracestate")
_PROPAGATOR = TraceContextTextMapPropagator()

Scope = dict[str, Any]


class TraceRequests:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not telemetry.enabled():
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k in _PROPAGATED}
        method, path = scope["method"], scope["path"]
        with telemetry.tracer().start_as_current_span(
            f"{method} {path}",
            context=_PROPAGATOR.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
        ) as span:

            async def send_and_note(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                await send(message)

            await self.app(scope, receive, send_and_note)
