"""A client that goes silent in the middle of its request body (its host vanished, or a partition drops its
packets) on a real uvicorn server: it gets a 408 once the body has stopped arriving for the idle timeout,
nothing it sent is kept (no file row, no bytes on disk, no job), and the server goes on answering. Without
the timeout the server task waits on the body for as long as TCP takes to notice, holding the spooled upload."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn
from sqlalchemy import func, select

from api.app import create_app
from conductor.app.tenants import create_key
from conductor.config.settings import Settings
from conductor.store.models import File, Job
from tests.support.api_deployment import batch_file, free_port
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer

IDLE_S = 1.0


class Served:
    def __init__(self, app, port: int) -> None:  # type: ignore[no-untyped-def]
        self.app, self.port = app, port
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def stalled(self, head: str, sent: bytes) -> tuple[str, float]:
        """Send `head` and the first part of a longer body, then nothing: the status line, and the seconds
        after which it came."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=IDLE_S * 10) as sock:
            sock.sendall(head.encode() + b"\r\n" + sent)
            started = time.monotonic()
            reply = _reply(sock)
            return reply, time.monotonic() - started


def _head(path: str, key: str, content_type: str, length: int) -> str:
    """A POST's request line and headers, without the blank line that ends them."""
    return (
        f"POST {path} HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {length}\r\n"
    )


JOB = json.dumps({"problem": {"question": "What is 2 + 2?", "answer": "4"}}).encode()


def _reply(sock: socket.socket) -> str:
    """One whole HTTP response: its head, then as many bytes as its content-length says."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        int(v) for k, _, v in (h.partition(b":") for h in head.split(b"\r\n")) if k.lower() == b"content-length"
    )
    while len(body) < length:
        body += sock.recv(65536)
    return (head + b"\r\n\r\n" + body).decode(errors="replace")


@pytest.fixture
def served(tmp_path: Path, scripted: ScriptedLLMServer) -> Iterator[tuple[Served, str]]:
    pool_file = write_pool(scripted_pool(scripted.base_url), tmp_path / "pool.yaml")
    settings = Settings(
        home=tmp_path, broker_url="memory://", pool_file=pool_file, recursion=False, body_idle_timeout_s=IDLE_S
    )
    app = create_app(settings)
    with Served(app, free_port()) as s:
        key, _ = create_key(app.state.api.sessions, "acme")
        yield s, key


def _count(app, model) -> int:  # type: ignore[no-untyped-def]
    with app.state.api.sessions() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def test_an_upload_that_stops_mid_body_is_a_408_and_leaves_no_bytes(served, tmp_path: Path) -> None:
    server, key = served
    content = batch_file(200)
    boundary = "b0undary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    head = _head("/v1/files", key, f"multipart/form-data; boundary={boundary}", len(body))

    reply, after = server.stalled(head, body[: len(body) // 2])

    assert reply.startswith("HTTP/1.1 408"), reply
    assert "CONDUCTOR_BODY_IDLE_TIMEOUT_S" in reply
    assert IDLE_S * 0.9 <= after < IDLE_S * 5
    assert _count(server.app, File) == 0
    assert not list((tmp_path / "files").glob("*"))


def test_a_json_body_that_stops_midway_is_a_408_and_no_job(served) -> None:
    server, key = served
    reply, _ = server.stalled(_head("/v1/jobs", key, "application/json", len(JOB)), JOB[:10])

    assert reply.startswith("HTTP/1.1 408"), reply
    assert json.loads(reply.split("\r\n\r\n", 1)[1])["error"]["code"] == "timeout"
    assert _count(server.app, Job) == 0


def test_a_slow_body_that_keeps_coming_is_not_cut_and_the_server_answers_after_a_stall(served) -> None:
    server, key = served
    head = _head("/v1/jobs", key, "application/json", len(JOB))
    server.stalled(head, JOB[:5])  # a stalled client first: it must not hold up the next one
    with socket.create_connection(("127.0.0.1", server.port), timeout=IDLE_S * 10) as sock:
        sock.sendall(head.encode() + b"\r\n")
        for i in range(0, len(JOB), 8):  # a piece every half the idle timeout: slower in all than the timeout
            sock.sendall(JOB[i : i + 8])
            time.sleep(IDLE_S / 2)
        reply = _reply(sock)

    assert reply.startswith("HTTP/1.1 201"), reply
    assert _count(server.app, Job) == 1
