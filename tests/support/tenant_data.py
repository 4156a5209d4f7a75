"""Tenant data for tests of training consent, retention and deletion: a marker planted in a
tenant's questions, uploaded files and (through answers) webhook bodies, over the real API."""

from __future__ import annotations

import io
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from conductor.app.tenants import create_key
from conductor.config.pool import Pool
from conductor.config.settings import Settings
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.webhook_receiver import Receiver
from tests.support.workflows import block, question_of

MARKER = re.compile(r"[A-Z]+-[A-Z]+-[0-9a-f]{4}")


def relay_script(model: str, messages: list[dict], body: dict) -> Reply:
    """The Conductor hands the question's marker on in its subtasks; workers repeat their subtask, so
    the marker reaches plans, step outputs, answers and the webhook bodies that carry them."""
    if model.endswith("scripted-conductor"):
        found = MARKER.search(question_of(messages))
        relay = f"relay {found.group(0) if found else 'nothing'}"
        return Reply(block("[0, 1]", json.dumps([relay, f"{relay} again"]), '[[], "all"]'))
    return Reply(f"{model.rsplit('-', 1)[-1]} did <{messages[-1]['content'][:60]}>")


@dataclass
class Tenant:
    name: str
    marker: str
    key: str
    tenant_id: str
    job_ids: list[str]
    batch_id: str
    file_ids: list[str]


def _wait(client: TestClient, path: str, key: str, done: set[str]) -> dict:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        body = client.get(path, headers={"Authorization": f"Bearer {key}"}).json()
        if body["status"] in done:
            return body
        time.sleep(0.2)
    raise AssertionError(f"{path} did not finish: {body}")


def fill(client: TestClient, name: str, marker: str, hook: str) -> Tenant:
    """A job with a reference (scored), feedback and a webhook URL of its own, a chat request, and a Batch
    API batch with metadata from an uploaded file with one line that cannot be stored: the marker is in
    every question, custom_id, URL and the metadata, so also in answers, webhooks and the batch's error file."""
    sessions = client.app.state.api.sessions  # type: ignore[attr-defined]
    key, tenant_id = create_key(sessions, name, webhook_url=hook)
    h = {"Authorization": f"Bearer {key}"}
    # The caller's own words beyond the question: the job's webhook URL, the lines' custom_ids, the
    # batch's metadata.
    job = client.post(
        "/v1/jobs",
        json={
            "problem": {"question": f"[wf:fanout] {marker} 6*7?", "answer": "42"},
            "webhook_url": f"{hook}?tag={marker}",
        },
        headers=h,
    ).json()["id"]
    chat = client.post(
        "/v1/chat/completions",
        json={"model": "conductor", "messages": [{"role": "user", "content": f"[wf:chain] {marker} hello"}]},
        headers=h,
    ).json()["conductor"]["job_id"]
    lines = [
        {
            "custom_id": f"{name}-{i}-{marker}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "conductor", "messages": [{"role": "user", "content": f"[wf:single] {marker} {i}"}]},
        }
        for i in range(3)
    ]
    # A line no store can hold: it becomes the batch's error-file line, its custom_id with the marker.
    unstorable = {"model": "conductor", "messages": [{"role": "user", "content": f"{marker} \x00"}]}
    lines.append({"custom_id": f"{name}-{marker}", "method": "POST", "url": "/v1/chat/completions", "body": unstorable})
    upload = "\n".join(json.dumps(x) for x in lines).encode()
    f = client.post("/v1/files", headers=h, files={"file": ("in.jsonl", io.BytesIO(upload))}, data={"purpose": "batch"})
    batch = client.post(
        "/v1/batches",
        headers=h,
        json={
            "input_file_id": f.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "metadata": {"note": marker},
        },
    ).json()
    _wait(client, f"/v1/jobs/{job}", key, {"done"})
    ended = _wait(client, f"/v1/batches/{batch['id']}", key, {"completed"})
    assert client.post(f"/v1/jobs/{job}/feedback", json={"score": "up"}, headers=h).status_code == 200
    files = [f.json()["id"], ended["output_file_id"], ended["error_file_id"]]
    return Tenant(name, marker, key, tenant_id, [job, chat], batch["id"], files)


@contextmanager
def api_with_hooks(tmp_path: Path, database_url: str | None) -> Iterator[tuple[TestClient, Receiver, Settings]]:
    """The API over an in-process worker on `database_url` (None: SQLite in `tmp_path`), the relay
    script behind greedy workers, and a webhook receiver."""
    server = ScriptedLLMServer(relay_script).start()
    receiver = Receiver(fail=0)
    spec = scripted_pool(server.base_url).model_dump(mode="json", exclude_none=True)
    for worker in spec["workers"]:
        worker["temperature"] = 0.0  # greedy: their answers land in the call cache too
    pool_file = write_pool(Pool.model_validate(spec), tmp_path / "pool.yaml")
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        broker_url="memory://",
        pool_file=pool_file,
        recursion=False,
        batch_sweep_s=0.2,
        webhook_backoff_s=0.1,
        webhook_allow=("127.0.0.1",),  # the receiver is on loopback, refused by default
    )
    try:
        with TestClient(create_app(settings)) as client:
            yield client, receiver, settings
    finally:
        receiver.httpd.shutdown()
        server.stop()
