"""A real OTLP/HTTP trace receiver: the network edge the exporters talk to in tests.

It answers `POST /v1/traces` as a collector does, decoding each body as the protobuf
`ExportTraceServiceRequest` (gzip or not) with `opentelemetry-proto`, and keeps every span it was
sent: ids as hex, attributes as plain values.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


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
