"""A real OTLP/HTTP trace receiver: the network edge the exporters talk to in tests.

It answers `POST /v1/traces` as a collector does, decoding each body as the protobuf
`ExportTraceServiceRequest` (gzip or not) with `opentelemetry-proto`, and keeps every span it was
sent: ids as hex, attributes as plain values. The span-tree helpers below serve any receiver's spans
(this one's, or those read back from Arize Phoenix: `tests/support/phoenix.py`).
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

if TYPE_CHECKING:
    from conductor.store.models import Step


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class OtlpReceiver:
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver._take(ExportTraceServiceRequest.FromString(body))
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _take(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            for rs in request.resource_spans:
                resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.append(
                            ReceivedSpan(
                                trace_id=s.trace_id.hex(),
                                span_id=s.span_id.hex(),
                                parent_id=s.parent_span_id.hex() or None,
                                name=s.name,
                                service=str(resource.get("service.name", "")),
                                attributes={a.key: _value(a.value) for a in s.attributes},
                            )
                        )

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        with self._lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def wait_for(self, done: Callable[[OtlpReceiver], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not done(self):
            if time.monotonic() > deadline:
                raise TimeoutError(f"spans did not arrive: {[(s.name, s.span_id) for s in self.spans]}")
            time.sleep(0.1)


def children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_id == parent.span_id]


def subtree(spans: list[ReceivedSpan], top: ReceivedSpan) -> list[ReceivedSpan]:
    """`top` and every span below it."""
    return [top] + [s for child in children(spans, top) for s in subtree(spans, child)]


def one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def assert_no_orphans(spans: list[ReceivedSpan], root_parent: str | None) -> None:
    """Every span's parent is in `spans` (or is `root_parent`, the caller's), and no span came twice."""
    ids = {s.span_id for s in spans}
    orphans = [(s.name, s.parent_id) for s in spans if s.parent_id not in ids and s.parent_id != root_parent]
    assert not orphans, orphans
    assert len(ids) == len(spans), "every span sent once"


def assert_fanout_job(spans: list[ReceivedSpan], job: ReceivedSpan, steps: dict[int, Step]) -> list[ReceivedSpan]:
    """The tree below a `[wf:fanout]` job's span (the scripted Conductor's plan: two parts, then a step that
    sees both): its round -> the plan, with the Conductor's call, and three steps -> one model call each,
    each step's call with the token counts of its row in `steps` (by step index). Returns the model calls,
    the Conductor's first."""
    (round_,) = children(spans, job)
    assert round_.name == "conductor.round plan" and round_.attributes["conductor.round.steps"] == 3
    below_round = children(spans, round_)
    assert sorted(s.name for s in below_round) == ["conductor.plan"] + ["conductor.run_step"] * 3
    (conductor_call,) = children(spans, one(below_round, "conductor.plan"))
    assert conductor_call.attributes["gen_ai.operation.name"] == "chat"
    assert conductor_call.attributes["conductor.worker.name"] == "conductor"
    calls = [conductor_call]
    step_spans = sorted(
        (s for s in below_round if s.name == "conductor.run_step"), key=lambda s: s.attributes["conductor.step.index"]
    )
    assert [s.attributes["conductor.step.index"] for s in step_spans] == [0, 1, 2]
    assert [s.attributes["conductor.step.access"] for s in step_spans] == ["", "", "0,1"]
    for span in step_spans:
        row = steps[span.attributes["conductor.step.index"]]
        assert span.attributes["conductor.worker.name"] == row.worker_name
        assert span.attributes["conductor.job.id"] == job.attributes["conductor.job.id"]
        (call,) = children(spans, span)
        assert call.name == f"chat {call.attributes['gen_ai.request.model']}"
        assert call.attributes["conductor.worker.name"] == row.worker_name
        assert (call.attributes["gen_ai.usage.input_tokens"], call.attributes["gen_ai.usage.output_tokens"]) == (
            row.prompt_tokens,
            row.completion_tokens,
        )
        assert row.completion_tokens > 0
        calls.append(call)
    return calls
