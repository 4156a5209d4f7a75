"""Batches you can repair: the failed lines of an ended batch run again as a new linked batch (API and
CLI), and a batch carries its usage. Embedded system (SQLite, in-process worker), scripted models."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.api.conftest import ApiHarness
from tests.conftest import default_script
from tests.support.api_deployment import batch_file
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import question_of

ROOT = Path(__file__).resolve().parents[2]


def flaky(broken: dict[str, bool]) -> Any:
    """The default script, except that a question with `[flaky]` fails while `broken["now"]`."""
    base = default_script()

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if broken["now"] and "[flaky]" in question_of(messages):
            return Reply(status=400, error="scripted failure")
        return base(model, messages, body)

    return script


def _ended(h: ApiHarness, key: str, batch_id: str) -> dict[str, Any]:
    for _ in range(300):
        b = h.client.get(f"/v1/batches/{batch_id}", headers=h.headers(key)).json()
        if b["status"] in ("completed", "failed", "cancelled", "expired"):
            return b  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"batch {batch_id} did not end")


def test_only_the_failed_lines_run_again_as_a_linked_batch_with_usage(harness: ApiHarness):
    h = harness
    broken = {"now": True}
    h.server.script = flaky(broken)
    key = h.key("acme")
    lines = [json.loads(x) for x in batch_file(3).decode().splitlines()]
    lines[1]["body"]["messages"][0]["content"] += " [flaky]"
    data = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
    fid = h.client.post(
        "/v1/files", files={"file": ("in.jsonl", data)}, data={"purpose": "batch"}, headers=h.headers(key)
    )
    body = {"input_file_id": fid.json()["id"], "endpoint": "/v1/chat/completions", "metadata": {"run": "1"}}
    created = h.client.post("/v1/batches", json=body, headers=h.headers(key)).json()
    early = h.client.post(f"/v1/batches/{created['id']}/retry", headers=h.headers(key))
    old = _ended(h, key, created["id"])
    assert old["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    assert early.status_code == 409 and "once it has ended" in early.json()["error"]["message"]
    usage = old["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] > 0 and usage["model_calls"] >= 4

    assert h.client.post(f"/v1/batches/{old['id']}/retry", headers=h.headers(h.key("globex"))).status_code == 404
    broken["now"] = False
    r = h.client.post(f"/v1/batches/{old['id']}/retry", headers=h.headers(key))
    assert r.status_code == 200, r.text
    new = _ended(h, key, r.json()["id"])
    assert new["metadata"] == {"run": "1", "retry_of": old["id"]}
    assert new["request_counts"] == {"total": 1, "completed": 1, "failed": 0}
    out = h.client.get(f"/v1/files/{new['output_file_id']}/content", headers=h.headers(key)).text
    assert [json.loads(x)["custom_id"] for x in out.splitlines()] == ["r1"], "only the failed line ran again"
    again = h.client.get(f"/v1/batches/{old['id']}", headers=h.headers(key)).json()
    assert again["request_counts"] == old["request_counts"], "the old batch is left as it was"
    nothing = h.client.post(f"/v1/batches/{new['id']}/retry", headers=h.headers(key))
    assert nothing.status_code == 409 and "no failed lines" in nothing.json()["error"]["message"]


def test_conductor_retry_reruns_the_failed_problems_of_a_cli_batch(tmp_path: Path):
    broken = {"now": True}
    server = ScriptedLLMServer(flaky(broken)).start()
    try:
        pool_file = write_pool(scripted_pool(server.base_url), tmp_path / "pool.yaml")
        problems = tmp_path / "p.jsonl"
        problems.write_text(
            '{"id": "a", "question": "[wf:single] one"}\n{"id": "b", "question": "[wf:single] [flaky] two"}\n'
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
        env |= {"CONDUCTOR_HOME": str(tmp_path), "CONDUCTOR_POOL_FILE": str(pool_file), "CONDUCTOR_RECURSION": "false"}

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            cmd = [sys.executable, "-m", "conductor.cli.main", *args]
            return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)

        first = cli("run", str(problems))
        statuses = {json.loads(x)["id"]: json.loads(x)["status"] for x in first.stdout.splitlines()}
        assert statuses == {"a": "done", "b": "failed"}, first.stderr
        batch_id = re.findall(r"batch ([0-9a-f]{32}):", first.stderr)[-1]
        broken["now"] = False
        second = cli("retry", batch_id)
        assert second.returncode == 0, second.stderr
        rerun = [json.loads(x) for x in second.stdout.splitlines()]
        assert [(x["id"], x["status"]) for x in rerun] == [("b", "done")]
    finally:
        server.stop()
