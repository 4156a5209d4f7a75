"""A small scripted OpenAI-compatible HTTP server: the one stand-in allowed, at the network edge.

Tests give it a `script(model, messages, body) -> Reply`; it records every request with its
start and end time, so tests can prove overlap, ordering, retries and rate limits.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str = "ok"
    delay_s: float = 0.0
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    #: Function calls to answer with (OpenAI's `message.tool_calls`), e.g. `[("get_weather", '{"city": "Paris"}')]`.
    tool_calls: list[tuple[str, str]] | None = None


@dataclass
class Call:
    model: str
    messages: list[dict]
    body: dict
    started: float
    ended: float = 0.0
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def last_user(self) -> str:
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "user"), "")


Script = Callable[[str, list[dict], dict], Reply]


def fake_token_ids(text: str, vocab: int = 50000) -> list[int]:
    """Deterministic ids, one per whitespace-separated piece (enough for trace plumbing tests);
    below `vocab` when a real model must be able to train on them."""
    return [sum(map(ord, piece)) % vocab + 1 for piece in text.split(" ")] if text else []


def usage(content: str, vocab: int = 50000) -> dict[str, int]:
    """The `usage` the server reports for an answer: 10 prompt tokens, one completion token per piece."""
    completion = max(1, len(fake_token_ids(content, vocab)))
    return {"prompt_tokens": 10, "completion_tokens": completion, "total_tokens": 10 + completion}


class ScriptedLLMServer:
    def __init__(
        self, script: Script, *, prompt_token_ids: bool = False, vocab: int = 50000, host: str = "127.0.0.1"
    ) -> None:
        self.script = script
        #: Answer logprob requests as vLLM with `return_token_ids` does (prompt ids too), or as a plain server.
        self.prompt_token_ids = prompt_token_ids
        self.vocab = vocab
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body go out as two writes: with Nagle on, a keep-alive client waits for
            # the delayed ACK (~40 ms) on every call, which swamps "a model that answers at once".
            disable_nagle_algorithm = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                call = Call(
                    model=body.get("model", ""), messages=body.get("messages", []), body=body, started=time.monotonic()
                )
                call.headers = {k.lower(): v for k, v in self.headers.items()}
                with server._lock:
                    server.calls.append(call)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    reply = server.script(call.model, call.messages, body)
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                call.ended = time.monotonic()
                call.status = reply.status
                if reply.status != 200:
                    self._send(
                        reply.status,
                        {
                            "error": {
                                "message": reply.error or "scripted error",
                                "type": "server_error",
                                "code": reply.status,
                            }
                        },
                        reply.headers,
                    )
                    return
                self._send(
                    200,
                    _completion(
                        call.model,
                        reply.content,
                        bool(body.get("logprobs")),
                        call.last_user if server.prompt_token_ids else None,
                        server.vocab,
                        reply.tool_calls,
                    ),
                    reply.headers,
                )

            def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        self.httpd = _Server((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.httpd.server_address[0]}:{self.httpd.server_address[1]}/v1"

    def start(self) -> ScriptedLLMServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def calls_for(self, prefix: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.model.startswith(prefix)]

    def take_calls(self) -> list[Call]:
        """The calls recorded so far, and start counting afresh (a server shared by several tests or runs)."""
        with self._lock:
            taken = list(self.calls)
            self.calls.clear()
        return taken

    def forget_calls(self) -> None:
        self.take_calls()


class _Server(ThreadingHTTPServer):
    # The default backlog of 5 resets connections when many clients connect at once (benchmarks).
    request_queue_size = 256


def _completion(
    model: str,
    content: str,
    logprobs: bool,
    prompt: str | None = None,
    vocab: int = 50000,
    tool_calls: list[tuple[str, str]] | None = None,
) -> dict:
    ids = fake_token_ids(content, vocab)
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
    if tool_calls:
        calls = [
            {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": arguments}}
            for i, (name, arguments) in enumerate(tool_calls)
        ]
        choice.update(finish_reason="tool_calls", message={"role": "assistant", "content": None, "tool_calls": calls})
    if logprobs:
        choice["logprobs"] = {
            "content": [
                {"token": f"token_id:{i}", "logprob": -0.1 - (i % 7) / 10, "bytes": None, "top_logprobs": []}
                for i in ids
            ]
        }
    out = {
        "id": f"chatcmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(content, vocab),
    }
    if logprobs and prompt is not None:  # what vLLM adds with return_token_ids: the trace keeps both id lists
        choice["token_ids"] = ids
        out["prompt_token_ids"] = fake_token_ids(prompt, vocab) or [1]
    return out
