"""The embedded default (one process, memory:// broker, SQLite) runs Batch API work the same way:
its in-process worker reads the file and plays beat's part, sweeping batches every `batch_sweep_s`."""

from __future__ import annotations

import json
import time

from tests.api.conftest import ApiHarness
from tests.support.api_deployment import batch_file


def test_a_batch_completes_in_the_embedded_mode(harness: ApiHarness):
    h = harness.headers(harness.key("acme", scopes=["files", "batches"]))
    f = harness.client.post(
        "/v1/files", headers=h, files={"file": ("in.jsonl", batch_file(6))}, data={"purpose": "batch"}
    )
    created = harness.client.post(
        "/v1/batches",
        headers=h,
        json={"input_file_id": f.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"},
    ).json()
    assert created["status"] in ("validating", "in_progress")  # the read is a worker's task, not the request's
    deadline = time.monotonic() + 60
    batch = created
    while batch["status"] != "completed" and time.monotonic() < deadline:
        time.sleep(0.2)
        batch = harness.client.get(f"/v1/batches/{created['id']}", headers=h).json()
    assert batch["status"] == "completed" and batch["request_counts"] == {"total": 6, "completed": 6, "failed": 0}
    out = harness.client.get(f"/v1/files/{batch['output_file_id']}/content", headers=h).text.splitlines()
    assert [json.loads(x)["custom_id"] for x in out] == [f"r{i}" for i in range(6)]
