"""The cost knob: `reasoning.effort` mapped to steps, replans and samples, a maximum USD per problem,
and estimates before a batch runs. An embedded system (SQLite, in-process worker), scripted models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from conductor.store.models import Job
from tests.api.conftest import ApiHarness
from tests.support.api_deployment import batch_file
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool

ROOT = Path(__file__).resolve().parents[2]


def _jobs_in_store(h: ApiHarness) -> int:
    with h.client.app.state.api.sessions() as s:  # type: ignore[attr-defined]
        return int(s.scalar(select(func.count()).select_from(Job)) or 0)


def _done(h: ApiHarness, key: str, job_id: str) -> dict[str, Any]:
    for _ in range(200):
        job = h.client.get(f"/v1/jobs/{job_id}", headers=h.headers(key)).json()
        if job["status"] in ("done", "failed", "budget_exceeded"):
            return job  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end")


def _job(h: ApiHarness, key: str, **body: Any) -> dict[str, Any]:
    body = {"problem": {"question": "[wf:fanout] 6*7?"}, **body}
    r = h.client.post("/v1/jobs", json=body, headers=h.headers(key))
    assert r.status_code == 201, r.text
    return _done(h, key, r.json()["id"])


def test_low_effort_runs_one_step_and_high_effort_samples_three_workflows(harness: ApiHarness):
    key = harness.key("acme")
    low = _job(harness, key, reasoning={"effort": "low"})
    rounds = [r for c in low["chains"] for r in c["rounds"]]
    assert low["samples"] == 1 and rounds and all(r["parse_status"] == "failed" for r in rounds)
    assert "at most 1" in rounds[0]["parse_error"], "a three-step plan is refused at low effort"
    one = _job(harness, key, problem={"question": "[wf:single] 6*7?"}, reasoning={"effort": "low"})
    assert one["status"] == "done" and [len(r["steps"]) for c in one["chains"] for r in c["rounds"]] == [1]
    medium = _job(harness, key)
    assert [len(r["steps"]) for c in medium["chains"] for r in c["rounds"]] == [3]
    high = _job(harness, key, reasoning={"effort": "high"})
    assert high["samples"] == 3 and len([c for c in high["chains"] if c["parent_step_id"] is None]) == 3


def test_an_unknown_effort_or_a_bad_max_usd_is_a_400_and_writes_nothing(harness: ApiHarness):
    h = harness
    key = h.key("acme")
    before = _jobs_in_store(h)
    chat = {"model": "conductor", "messages": [{"role": "user", "content": "hi"}]}
    refused = [
        h.client.post(
            "/v1/jobs", json={"problem": {"question": "q"}, "reasoning": {"effort": "max"}}, headers=h.headers(key)
        ),
        h.client.post("/v1/chat/completions", json={**chat, "reasoning_effort": "extreme"}, headers=h.headers(key)),
        h.client.post("/v1/chat/completions", json={**chat, "max_usd": -1}, headers=h.headers(key)),
        h.client.post(
            "/v1/responses",
            json={"model": "conductor", "input": "hi", "reasoning": {"effort": "xhigh"}},
            headers=h.headers(key),
        ),
        h.client.post(
            "/v1/estimates",
            json={"problems": [{"question": "q"}], "reasoning": {"effort": "max"}},
            headers=h.headers(key),
        ),
    ]
    assert [r.status_code for r in refused] == [400] * 5
    assert all(r.json()["error"]["type"] == "invalid_request_error" for r in refused)
    assert "'low', 'medium' or 'high'" in refused[0].json()["error"]["message"]
    assert _jobs_in_store(h) == before


def test_max_usd_becomes_the_jobs_budget_and_effort_holds_per_batch_line(harness: ApiHarness):
    h = harness
    key = h.key("acme")
    r = h.client.post(
        "/v1/chat/completions",
        json={"model": "conductor", "messages": [{"role": "user", "content": "[wf:single] hi"}], "max_usd": 0.25},
        headers=h.headers(key),
    )
    with h.client.app.state.api.sessions() as s:  # type: ignore[attr-defined]
        assert s.get(Job, r.headers["x-conductor-job-id"]).budget_usd == 0.25

    lines = [json.loads(line) for line in batch_file(3).decode().splitlines()]
    lines[0]["body"]["reasoning_effort"] = "low"
    lines[1]["body"]["reasoning_effort"] = "ultra"  # this line alone is refused (error file), the rest run
    lines[2]["body"]["max_usd"] = 0.5
    data = ("\n".join(json.dumps(x) for x in lines) + "\n").encode()
    fid = h.client.post(
        "/v1/files", files={"file": ("b.jsonl", data)}, data={"purpose": "batch"}, headers=h.headers(key)
    )
    batch = h.client.post(
        "/v1/batches",
        json={"input_file_id": fid.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"},
        headers=h.headers(key),
    ).json()
    for _ in range(200):
        batch = h.client.get(f"/v1/batches/{batch['id']}", headers=h.headers(key)).json()
        if batch["status"] == "completed":
            break
        time.sleep(0.1)
    assert batch["request_counts"] == {"total": 3, "completed": 2, "failed": 1}
    with h.client.app.state.api.sessions() as s:  # type: ignore[attr-defined]
        jobs = {j.external_id: j for j in s.scalars(select(Job).where(Job.batch_id == batch["id"]))}
    assert set(jobs) == {"r0", "r2"}
    assert jobs["r0"].options["effort"] == "low" and jobs["r0"].options["max_steps"] == 1
    assert jobs["r2"].budget_usd == 0.5


def test_an_estimate_states_its_method_and_learns_from_recent_jobs(harness: ApiHarness):
    h = harness
    key = h.key("acme")

    def estimate(effort: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"problems": [{"question": "a"}, {"question": "b"}]}
        if effort:
            body["reasoning"] = {"effort": effort}
        r = h.client.post("/v1/estimates", json=body, headers=h.headers(key))
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    first = estimate()
    assert first["method"].startswith("pool-upper-bound") and first["problems"] == 2
    assert first["per_problem"]["model_calls"] == 1 + 5, "one plan (replans off here) and max_steps=5 worker calls"
    assert estimate("low")["per_problem"]["model_calls"] == 1 + 1
    assert estimate("high")["total"]["model_calls"] == 2 * 3 * (1 + 5), "three samples per problem"

    jobs = [_job(h, key) for _ in range(3)]
    learned = estimate()
    assert learned["method"].startswith("recent-usage: mean per sample of the newest 3 finished jobs at effort medium")
    mean_calls = sum(j["usage"]["model_calls"] for j in jobs) / 3
    assert learned["per_problem"]["model_calls"] == round(mean_calls, 2)
    assert learned["total"]["total_tokens"] == round(2 * sum(j["usage"]["total_tokens"] for j in jobs) / 3)
    assert estimate("low")["method"].startswith("pool-upper-bound"), "no low-effort history yet"


def test_conductor_run_estimate_prints_the_estimate_and_submits_nothing(tmp_path: Path, scripted):
    pool_file = write_pool(scripted_pool(scripted.base_url), tmp_path / "pool.yaml")
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"question": "one"}\n{"question": "two"}\nnot json\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_")}
    env |= {
        "CONDUCTOR_HOME": str(tmp_path),
        "CONDUCTOR_POOL_FILE": str(pool_file),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "conductor.cli.main", "run", str(problems), *args]
        return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)

    out = run("--estimate", "--effort", "low")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["problems"] == 2 and report["effort"] == "low" and report["method"].startswith("pool-upper-bound")
    assert report["total"]["model_calls"] == 2 * 2
    assert scripted.calls == [], "an estimate calls no model"
    bad = run("--estimate", "--effort", "extreme")
    assert bad.returncode != 0 and "reasoning.effort must be one of" in bad.stderr
