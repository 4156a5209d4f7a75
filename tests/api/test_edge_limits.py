"""Bad input stops at the API's edge, on PostgreSQL: bodies past their size (413), questions past
their length, text PostgreSQL cannot hold (NUL, lone surrogates) refused with a 400 naming the
field, or as one Batch API line's error while the other lines run. Nothing refused is written, and
nothing accepted is a job that cannot start."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from api.app import create_app
from conductor.app.tenants import create_key
from conductor.config.settings import Settings
from conductor.store.models import File, Job
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer

pytestmark = pytest.mark.services

LIMITS = {"max_body_bytes": 64 << 10, "max_upload_bytes": 256 << 10, "max_question_chars": 2000, "max_batch_lines": 5}
NUL, SURROGATE = "a\x00b", "a\ud800b"


class Edge:
    def __init__(self, client: TestClient) -> None:
        self.client = client
        key, _ = create_key(self.sessions, "acme")
        self.auth = {"Authorization": f"Bearer {key}"}

    @property
    def sessions(self) -> Any:
        return self.client.app.state.api.sessions  # type: ignore[attr-defined]

    def post(self, path: str, body: Any) -> Any:
        """JSON as clients send it: ASCII with escapes, so lone surrogates travel as `\\ud800`."""
        headers = {**self.auth, "content-type": "application/json"}
        return self.client.post(path, content=json.dumps(body).encode(), headers=headers)

    def jobs(self) -> int:
        with self.sessions() as s:
            return int(s.scalar(select(func.count()).select_from(Job)) or 0)

    def wait_batch(self, batch_id: str, timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batch = self.client.get(f"/v1/batches/{batch_id}", headers=self.auth).json()
            if batch["status"] in ("completed", "failed", "expired", "cancelled"):
                return dict(batch)
            time.sleep(0.2)
        raise AssertionError(f"batch {batch_id} unfinished after {timeout} s")

    def lines(self, file_id: str) -> list[dict[str, Any]]:
        text = self.client.get(f"/v1/files/{file_id}/content", headers=self.auth).text
        return [json.loads(x) for x in text.splitlines()]


@pytest.fixture
def edge(tmp_path: Path, scripted: ScriptedLLMServer, pg_url: str) -> Iterator[Edge]:
    pool_file = write_pool(scripted_pool(scripted.base_url), tmp_path / "pool.yaml")
    settings = Settings(
        home=tmp_path,
        database_url=pg_url,
        broker_url="memory://",
        pool_file=pool_file,
        recursion=False,
        batch_sweep_s=0.2,
        **LIMITS,
    )
    with TestClient(create_app(settings)) as client:
        yield Edge(client)


def _job(question: str, **problem: Any) -> dict[str, Any]:
    return {"problem": {"question": question, **problem}}


def _chat(content: str) -> dict[str, Any]:
    return {"model": "conductor", "messages": [{"role": "user", "content": content}]}


def _error(r: Any, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    return dict(r.json()["error"])


@pytest.mark.parametrize("text", [NUL, SURROGATE], ids=["nul", "lone-surrogate"])
def test_unstorable_text_is_a_400_naming_the_field_and_writes_nothing(edge: Edge, text: str):
    cases = [
        ("/v1/jobs", _job(text), "problem.question"),
        ("/v1/jobs", _job("fine", metadata={"tag": ["x", text]}), "problem.metadata.tag.1"),
        ("/v1/jobs", _job("fine", answer=text), "problem.answer"),
        ("/v1/chat/completions", _chat(text), "messages.0.content"),
        ("/v1/chat/completions", {**_chat("fine"), "user": text}, "user"),
        ("/v1/responses", {"model": "conductor", "input": "fine", "instructions": text}, "instructions"),
        ("/v1/responses", {"model": "conductor", "input": [{"role": "user", "content": text}]}, "input.0.content"),
    ]
    for path, body, field in cases:
        started = time.monotonic()
        error = _error(edge.post(path, body), 400)
        assert error["param"] == field, (path, error)
        assert field in error["message"] and "cannot be stored" in error["message"]
        assert time.monotonic() - started < 5, "refused at once, not left waiting on a job that cannot start"
    assert edge.jobs() == 0


def _parameters(edge: Edge) -> list[tuple[str, str, list[str], list[str]]]:
    """Every operation of the API's schema: method, path template, its path and its string query parameters."""
    out = []
    for path, item in edge.client.app.openapi()["paths"].items():  # type: ignore[attr-defined]
        for method, op in item.items():
            params = op.get("parameters", [])
            in_path = [p["name"] for p in params if p["in"] == "path"]
            in_query = [p["name"] for p in params if p["in"] == "query" and "integer" not in json.dumps(p["schema"])]
            out.append((method.upper(), path, in_path, in_query))
    return out


def test_a_nul_in_any_path_or_query_parameter_is_a_400_naming_it(edge: Edge):
    # PostgreSQL refuses a NUL even in a lookup by id: `GET /v1/jobs/a%00b` was a 500 there (SQLite: a 404).
    checked = []
    for method, template, in_path, in_query in _parameters(edge):
        if in_path:
            url = template
            for name in in_path:
                url = url.replace("{" + name + "}", "a%00b")
            error = _error(edge.client.request(method, url, headers=edge.auth), 400)
            assert (error["param"], method, template) == ("path", method, template)
            assert "NUL" in error["message"]
            checked.append(url)
        for name in in_query:
            base = template.replace("{", "").replace("}", "")
            error = _error(edge.client.request(method, f"{base}?{name}=a%00b", headers=edge.auth), 400)
            assert (error["param"], method, template) == (f"query.{name}", method, template)
            checked.append(f"{base}?{name}")
    assert {
        "/v1/jobs/a%00b",
        "/v1/files/a%00b/content",
        "/v1/jobs?batch_id",
        "/v1/webhooks/deliveries?subject_id",
    } <= set(checked)
    assert edge.jobs() == 0


def test_a_budget_past_the_stores_integers_is_a_400_naming_the_field_and_a_derived_one_is_capped(edge: Edge):
    # PostgreSQL's INTEGER budget column: 2**31 tokens failed the insert (a 500; SQLite took it).
    error = _error(edge.post("/v1/jobs", {**_job("[wf:single] hi"), "budget_tokens": 2**31}), 400)
    assert error["param"] == "budget_tokens"
    assert _error(edge.post("/v1/chat/completions", {**_chat("hi"), "max_tokens": 2**31}), 400)["param"] == "max_tokens"
    assert edge.jobs() == 0
    # a chat budget is 20 times max_tokens: past the column's range it is capped, and the job runs
    r = edge.post("/v1/chat/completions", {**_chat("[wf:single] hi"), "max_completion_tokens": 2**31 // 20 + 1})
    assert r.status_code == 200, r.text
    with edge.sessions() as s:
        assert s.scalar(select(Job.budget_tokens)) == 2**31 - 1


def test_an_escaped_backslash_before_u0000_is_ordinary_text(edge: Edge):
    r = edge.post("/v1/jobs", _job("[wf:single] print('\\u0000')"))  # the characters \ u 0 0 0 0
    assert r.status_code == 201, r.text
    assert r.json()["question"] == "[wf:single] print('\\u0000')"


def test_a_body_past_its_limit_is_a_413_declared_or_streamed(edge: Edge):
    big = _job("x" * (LIMITS["max_body_bytes"] + 1))
    assert _error(edge.post("/v1/jobs", big), 413)["code"] == "too_large"
    chunks = (c for c in [json.dumps(big).encode()[i : i + 4096] for i in range(0, 70_000, 4096)])
    r = edge.client.post(
        "/v1/jobs", content=chunks, headers={**edge.auth, "content-type": "application/json"}
    )  # no content-length: chunked
    assert _error(r, 413)["code"] == "too_large"
    assert edge.jobs() == 0


def test_a_question_past_its_length_is_refused_whatever_the_route(edge: Edge):
    limit = LIMITS["max_question_chars"]
    assert "CONDUCTOR_MAX_QUESTION_CHARS" in _error(edge.post("/v1/jobs", _job("x" * (limit + 1))), 400)["message"]
    assert "at most 2000" in _error(edge.post("/v1/chat/completions", _chat("x" * (limit + 1))), 400)["message"]
    many = {"model": "conductor", "messages": [{"role": "user", "content": "y" * 600}] * 4}  # each short, together not
    assert "characters" in _error(edge.post("/v1/chat/completions", many), 400)["message"]
    assert edge.jobs() == 0
    assert edge.post("/v1/jobs", _job("[wf:single] " + "x" * (limit - 20))).status_code == 201


def _upload(edge: Edge, data: bytes, name: str = "in.jsonl") -> Any:
    return edge.client.post("/v1/files", files={"file": (name, data)}, data={"purpose": "batch"}, headers=edge.auth)


def _line(i: int, content: str) -> str:
    body = {"model": "conductor", "messages": [{"role": "user", "content": content}]}
    return json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})


def test_uploads_past_their_size_or_line_count_are_refused_and_kept_nowhere(edge: Edge, tmp_path: Path):
    assert _error(_upload(edge, b"x" * (LIMITS["max_upload_bytes"] + 1)), 413)["code"] == "too_large"
    boundary = "b0und4ry"
    head = f'--{boundary}\r\ncontent-disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
    head += f'--{boundary}\r\ncontent-disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n'
    streamed = (part for part in [head.encode(), *[b"x" * 65536] * 5, f"\r\n--{boundary}--\r\n".encode()])
    r = edge.client.post(  # no content-length: counted as it arrives
        "/v1/files",
        content=streamed,
        headers={**edge.auth, "content-type": f"multipart/form-data; boundary={boundary}"},
    )
    assert _error(r, 413)["code"] == "too_large"
    six = "\n".join(_line(i, "[wf:single] hi") for i in range(6)).encode()
    assert "at most 5 lines" in _error(_upload(edge, six), 400)["message"]
    with edge.sessions() as s:
        assert s.scalar(select(func.count()).select_from(File)) == 0
    assert not any((tmp_path / "files").glob("file-*"))
    assert _upload(edge, six.rsplit(b"\n", 1)[0]).status_code == 200  # five lines fit


def test_a_batch_line_with_unstorable_text_is_that_line_s_error_and_the_rest_run(edge: Edge):
    lines = [
        _line(1, "[wf:single] first"),
        _line(2, "[wf:single] has a NUL \x00 inside"),
        _line(3, "x" * (LIMITS["max_question_chars"] + 1)),
        _line(4, "[wf:single] last \ud800"),
        _line(5, "[wf:single] fine"),
    ]
    f = _upload(edge, "\n".join(lines).encode()).json()
    r = edge.post(
        "/v1/batches", {"input_file_id": f["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    )
    batch = edge.wait_batch(r.json()["id"])
    assert batch["status"] == "completed"
    assert [o["custom_id"] for o in edge.lines(batch["output_file_id"])] == ["r1", "r5"]
    errors = {e["custom_id"]: e["error"]["message"] for e in edge.lines(batch["error_file_id"])}
    assert set(errors) == {"r2", "r3", "r4"}
    assert errors["r2"].startswith("line 2: body.messages.0.content holds a NUL")
    assert "CONDUCTOR_MAX_QUESTION_CHARS" in errors["r3"]
    assert errors["r4"].startswith("line 4: body.messages.0.content holds a lone surrogate")
    with edge.sessions() as s:
        assert sorted(s.scalars(select(Job.status))) == ["done", "done"]
