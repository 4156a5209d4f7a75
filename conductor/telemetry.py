"""OpenTelemetry traces: off unless an OTLP endpoint is configured, one trace per job when on.

Configured by the standard variables only (`OTEL_EXPORTER_OTLP_ENDPOINT` or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL` = `http/protobuf` (default) or
`grpc`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`, `OTEL_BSP_*`; `OTEL_SDK_DISABLED=true` or
`OTEL_TRACES_EXPORTER=none` turn an endpoint's traces off again). Without an endpoint
`setup()` installs nothing and `enabled()` is False: the seams test that flag and make no span at
all, so tracing costs one attribute read per call when off.

A job's trace spans processes and Celery hops, so its identity lives in the job row
(`jobs.traceparent`: the job span's W3C context, minted at submission as a child of the caller's
span when there is one; `jobs.trace_caller`: that caller's span id). The job span and its round
spans are written when the job ends, from the rows, with those same ids (`pinned_ids`): every span
made before then (a plan, a step, a model call, in whatever process and however often re-sent)
already names them as parents, so the trace has one root and no orphans. A round's span id is
derived from the job span's and the round id (`round_context`), so no process has to look it up.

Spans are made at the seams only: the API's request handling, the dispatcher (context into task
headers), the task wrappers and the gateway. Message content is recorded only with
`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` (the GenAI conventions' opt-in); keys never.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "capture_content",
    "captures_on_spans",
    "context_of",
    "current_traceparent",
    "enabled",
    "new_job_trace",
    "parse_traceparent",
    "pinned_ids",
    "requested",
    "round_context",
    "setup",
    "stop",
    "tracer",
]

CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_INSTRUMENTATION = "conductor"
_PROPAGATOR = TraceContextTextMapPropagator()

_enabled = False
_capture = False
#: (trace id, span id) the next span started in this thread takes (see `pinned_ids`).
_pinned: ContextVar[tuple[int, int] | None] = ContextVar("conductor_pinned_span_ids", default=None)


def enabled() -> bool:
    return _enabled


def requested(env: Mapping[str, str]) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint is set, and neither the SDK's own switch
    (`OTEL_SDK_DISABLED=true`) nor `OTEL_TRACES_EXPORTER=none` turns them off, as for any OpenTelemetry SDK."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(name) for name in _ENDPOINTS)


def capture_content() -> bool:
    """Whether prompts and answers may go into span attributes (off unless asked)."""
    return _capture


def tracer() -> Tracer:
    return trace.get_tracer(_INSTRUMENTATION)


def setup(service_name: str = "conductor") -> bool:
    """Install the OTLP exporter once per process when an endpoint is configured; True when tracing is on."""
    global _enabled, _capture
    if _enabled or not requested(os.environ):
        return _enabled
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)}).merge(
        OTELResourceDetector().detect()
    )
    provider = TracerProvider(resource=resource, id_generator=_PinnableIds())
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    trace.set_tracer_provider(provider)
    _capture = captures_on_spans(os.environ.get(CAPTURE_CONTENT_ENV))
    _enabled = True
    return True


#: The values of CAPTURE_CONTENT_ENV that put content on spans: `true` (the instrumentations' first
#: spelling) and the latest GenAI conventions' modes that include spans; this project emits no events, so
#: `EVENT_ONLY` (like `NO_CONTENT`, `false` or unset) records none.
_SPAN_CAPTURE = frozenset({"true", "span_only", "span_and_event"})


def captures_on_spans(value: str | None) -> bool:
    """Whether a CAPTURE_CONTENT_ENV value asks for prompts and answers in span attributes."""
    return (value or "").strip().lower() in _SPAN_CAPTURE


def _exporter() -> Any:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        return GrpcExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

    return HttpExporter()  # reads the endpoint, headers, timeout and compression from OTEL_* itself


def force_flush(timeout_ms: int = 10_000) -> None:
    """Export what this process has buffered now (the exporter otherwise batches, and at exit)."""
    provider = trace.get_tracer_provider()
    flush = getattr(provider, "force_flush", None)
    if flush is not None:
        flush(timeout_ms)


def stop() -> None:
    """Flush and shut the exporter down: no more spans leave this process (OpenTelemetry keeps the
    first provider installed for good; what a library still makes with it is dropped)."""
    global _enabled
    shutdown = getattr(trace.get_tracer_provider(), "shutdown", None)
    if _enabled and shutdown is not None:
        shutdown()  # flushes first
    _enabled = False


class _PinnableIds(IdGenerator):
    """The SDK's random ids, except for a span started inside `pinned_ids`."""

    def generate_span_id(self) -> int:
        pinned = _pinned.get()
        return pinned[1] if pinned is not None else secrets.randbits(64) or 1

    def generate_trace_id(self) -> int:
        pinned = _pinned.get()
        return pinned[0] if pinned is not None else secrets.randbits(128) or 1


@contextlib.contextmanager
def pinned_ids(context: SpanContext) -> Iterator[None]:
    """Start the span made inside this block with `context`'s trace and span ids (a job or round span
    written when the job ends, whose ids its children have carried since it began)."""
    token = _pinned.set((context.trace_id, context.span_id))
    try:
        yield
    finally:
        _pinned.reset(token)


# -- trace contexts ------------------------------------------------------------------------


def parse_traceparent(value: str | None) -> SpanContext | None:
    """The span context a W3C `traceparent` names (remote); None for a missing or malformed one."""
    if not value:
        return None
    span = trace.get_current_span(_PROPAGATOR.extract({"traceparent": value}))
    ctx = span.get_span_context()
    return ctx if ctx.is_valid else None


def traceparent(ctx: SpanContext) -> str:
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def context_of(span_context: SpanContext | None) -> Context | None:
    """An OTel context whose parent is `span_context` (None: a root)."""
    return trace.set_span_in_context(NonRecordingSpan(span_context)) if span_context is not None else None


def new_job_trace(parent: str | None = None) -> dict[str, str | None]:
    """The job row's trace columns: its own span context, a child of `parent` (a stored `traceparent`:
    the request that created a batch, for the jobs of its lines) or else of the current span (an API
    request that carried a `traceparent`) when there is one. Empty when tracing is off."""
    if not _enabled:
        return {}
    stored = parse_traceparent(parent)
    caller = stored if stored is not None else trace.get_current_span().get_span_context()
    trace_id = caller.trace_id if caller.is_valid else secrets.randbits(128) or 1
    job = SpanContext(trace_id, secrets.randbits(64) or 1, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return {"traceparent": traceparent(job), "trace_caller": f"{caller.span_id:016x}" if caller.is_valid else None}


def current_traceparent() -> str | None:
    """The current span's W3C `traceparent` (the API request being handled), to be stored for work done
    later elsewhere; None when tracing is off or no span is current."""
    if not _enabled:
        return None
    ctx = trace.get_current_span().get_span_context()
    return traceparent(ctx) if ctx.is_valid else None


def caller_context(job: SpanContext, caller_span_id: str | None) -> SpanContext | None:
    """The job span's parent: the caller's span, in the job's trace (None: the job span is the root)."""
    if not caller_span_id:
        return None
    return SpanContext(job.trace_id, int(caller_span_id, 16), is_remote=True, trace_flags=job.trace_flags)


def round_context(job: SpanContext, round_id: int) -> SpanContext:
    """A round's span context, derived from its job's: every process computes the same one."""
    digest = hashlib.blake2b(f"{job.span_id:016x}:{round_id}".encode(), digest_size=8).digest()
    return SpanContext(job.trace_id, int.from_bytes(digest, "big") or 1, is_remote=True, trace_flags=job.trace_flags)


def inject(span_context: SpanContext | None) -> dict[str, str] | None:
    """Message headers that make `span_context` the parent of the task that receives them."""
    return {"traceparent": traceparent(span_context)} if span_context is not None else None
