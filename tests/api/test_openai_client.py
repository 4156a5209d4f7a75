"""The official `openai` client against a real `conductor api` process, real worker processes,
Redis and PostgreSQL, with the scripted model server behind the pool."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import default_script
from tests.support.api_deployment import Deployment, deploy

pytestmark = pytest.mark.services


@pytest.fixture
def deployment(tmp_path: Path, pg_url: str, redis_db: str) -> Iterator[Deployment]:
    with deploy(tmp_path, pg_url, redis_db, default_script(worker_delay=0.05)) as d:
        yield d


def test_models_and_chat_with_and_without_streaming(deployment: Deployment):
    client = deployment.client(deployment.key("acme"))
    assert [m.id for m in client.models.list()] == ["conductor", "conductor:pool"]

    raw = client.chat.completions.with_raw_response.create(
        model="conductor", messages=[{"role": "user", "content": "[wf:fanout] what is 6*7?"}]
    )
    reply = raw.parse()
    job_id = raw.headers["x-conductor-job-id"]
    assert reply.choices[0].message.content and reply.choices[0].finish_reason == "stop"
    extra = reply.model_extra["conductor"]
    assert extra["job_id"] == job_id and extra["rounds"] == 1 and extra["model_calls"] == 4
    assert extra["workflows"][0]["subtasks"] == ["part A", "part B", "combine"]
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens > 0

    stream = client.chat.completions.create(
        model="conductor",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "[wf:chain] 2+2?"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    first = chunks[0]
    streamed_job = first.model_extra["conductor"]["job_id"]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and chunks[-1].usage and chunks[-1].usage.total_tokens > 0
    job = httpx.get(
        f"{deployment.base_url}/jobs/{streamed_job}", headers={"Authorization": f"Bearer {client.api_key}"}
    ).json()
    assert job["status"] == "done" and job["answer"] == text


def _batch_lines(n: int, bad: set[int]) -> bytes:
    out = []
    for i in range(1, n + 1):
        if i in bad:
            out.append("{not json" if i % 2 else json.dumps({"custom_id": f"r{i}", "method": "GET", "url": "/v1/x"}))
            continue
        body = {"model": "conductor", "messages": [{"role": "user", "content": f"[wf:single] item {i}"}]}
        out.append(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}))
    return ("\n".join(out) + "\n").encode()


def test_a_fifty_line_batch_with_three_malformed_lines_accounts_for_every_line(deployment: Deployment):
    client = deployment.client(deployment.key("acme"))
    bad = {7, 20, 33}
    f = client.files.create(file=("in.jsonl", io.BytesIO(_batch_lines(50, bad))), purpose="batch")
    assert client.files.retrieve(f.id).bytes == f.bytes > 0
    batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.status in ("validating", "in_progress")
    deadline = time.monotonic() + 180
    while batch.status not in ("completed", "failed", "expired", "cancelled") and time.monotonic() < deadline:
        time.sleep(0.5)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "completed", deployment.api.tail()
    assert (batch.request_counts.total, batch.request_counts.completed, batch.request_counts.failed) == (50, 47, 3)
    out = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
    err = [json.loads(x) for x in client.files.content(batch.error_file_id).text.splitlines()]
    assert len(out) == 47 and len(err) == 3
    assert [o["custom_id"] for o in out] == [f"r{i}" for i in range(1, 51) if i not in bad]  # input order
    assert all(
        o["response"]["status_code"] == 200 and o["response"]["body"]["choices"][0]["message"]["content"] for o in out
    )
    assert [e["error"]["code"] for e in err] == ["invalid_request"] * 3
    assert [e["custom_id"] for e in err] == [None, "r20", None]
    assert [b.id for b in client.batches.list()] == [batch.id]


def test_batches_cancel_and_isolation_between_tenants(deployment: Deployment):
    deployment.server.script = default_script(worker_delay=1.0)
    a, b = deployment.client(deployment.key("tenant-a")), deployment.client(deployment.key("tenant-b"))
    f = a.files.create(file=("in.jsonl", io.BytesIO(_batch_lines(20, set()))), purpose="batch")
    batch = a.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    for call in (
        lambda: b.batches.retrieve(batch.id),
        lambda: b.batches.cancel(batch.id),
        lambda: list(b.batches.list(after=batch.id)),  # nor as a page cursor
        lambda: b.files.retrieve(f.id),
        lambda: b.files.content(f.id),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert list(b.batches.list()) == []
    time.sleep(1.0)
    cancelled = a.batches.cancel(batch.id)
    assert cancelled.status in ("cancelling", "cancelled")
    deadline = time.monotonic() + 60
    while cancelled.status != "cancelled" and time.monotonic() < deadline:
        time.sleep(0.5)
        cancelled = a.batches.retrieve(batch.id)
    assert cancelled.status == "cancelled"
    counts = cancelled.request_counts
    assert counts.total == 20 and counts.completed + counts.failed == 20 and counts.failed > 0
    with pytest.raises(openai.AuthenticationError):
        deployment.client("ck-wrong").models.list()


def test_structured_output_and_a_tool_call_on_the_production_deployment(tmp_path: Path, pg_url: str, redis_db: str):
    # The final step's format travels on the PostgreSQL job row to a worker process and back.
    from pydantic import BaseModel

    from tests.api.test_structured_outputs import WEATHER, script

    class City(BaseModel):
        name: str
        population: int

    with deploy(tmp_path, pg_url, redis_db, script) as d:
        client = d.client(d.key("acme"))
        done = client.chat.completions.parse(
            model="conductor", messages=[{"role": "user", "content": "Capital of France?"}], response_format=City
        )
        called = client.chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER]
        )
    assert done.choices[0].message.parsed == City(name="Paris", population=2_100_000)
    assert called.choices[0].finish_reason == "tool_calls"
    assert (called.choices[0].message.tool_calls or [])[0].function.name == "get_weather"
