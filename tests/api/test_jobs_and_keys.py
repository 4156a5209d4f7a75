"""Keys, tenant isolation, native jobs and chat through the app on the embedded system."""

from __future__ import annotations

import json
import time

from tests.api.conftest import ApiHarness, Quotas


def _wait(h: ApiHarness, key: str, job_id: str, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = h.client.get(f"/v1/jobs/{job_id}", headers=h.headers(key)).json()
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} unfinished")


def test_no_key_bad_key_expired_key_and_missing_scope_are_refused(harness: ApiHarness):
    h = harness
    assert h.client.get("/v1/models").status_code == 401
    assert h.client.get("/v1/models", headers=h.headers("ck-nope")).status_code == 401
    expired = h.key("acme", expires_in_days=-1)
    r = h.client.get("/v1/models", headers=h.headers(expired))
    assert r.status_code == 401 and expired not in r.text
    chat_only = h.key("acme", scopes=["chat"])
    assert h.client.get("/v1/jobs", headers=h.headers(chat_only)).status_code == 403
    good = h.key("acme")
    models = h.client.get("/v1/models", headers=h.headers(good)).json()
    assert [m["id"] for m in models["data"]] == ["conductor", "conductor:pool"]


def test_only_the_hash_of_a_key_is_stored(harness: ApiHarness):
    from sqlalchemy import select

    from conductor.store.models import ApiKey

    key = harness.key("acme")
    with harness.client.app.state.api.sessions() as s:  # type: ignore[attr-defined]
        stored = s.scalars(select(ApiKey.key_hash)).all()
    assert key not in stored and all(len(x) == 64 for x in stored)
    assert not any(key.encode() in p.read_bytes() for p in harness.home.glob("conductor.db*"))


def test_a_job_runs_and_another_tenant_gets_404_for_it(harness: ApiHarness):
    h = harness
    a, b = h.key("tenant-a"), h.key("tenant-b")
    r = h.client.post(
        "/v1/jobs", json={"problem": {"question": "[wf:chain] 2+2?", "answer": "4"}}, headers=h.headers(a)
    )
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    job = _wait(h, a, job_id)
    assert job["status"] == "done" and job["answer"] and job["workflow"]["subtasks"] == ["solve", "check"]
    assert job["usage"]["model_calls"] == 3 and job["usage"]["total_tokens"] > 0
    for method, path in [("get", f"/v1/jobs/{job_id}"), ("post", f"/v1/jobs/{job_id}/cancel")]:
        other = getattr(h.client, method)(path, headers=h.headers(b))
        assert other.status_code == 404 and "tenant-a" not in other.text
    assert h.client.get("/v1/jobs", headers=h.headers(b)).json()["data"] == []
    fb = h.client.post(f"/v1/jobs/{job_id}/feedback", json={"score": "up"}, headers=h.headers(a))
    assert fb.status_code == 200 and fb.json()["source"] == "feedback"


def test_the_same_idempotency_key_twice_makes_one_job(harness: ApiHarness):
    h = harness
    a = h.key("acme")
    body = {"problem": {"question": "once only"}}
    first = h.client.post("/v1/jobs", json=body, headers=h.headers(a, **{"Idempotency-Key": "k1"}))
    again = h.client.post("/v1/jobs", json=body, headers=h.headers(a, **{"Idempotency-Key": "k1"}))
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    listed = h.client.get("/v1/jobs", headers=h.headers(a)).json()["data"]
    assert len(listed) == 1


def test_listing_filters_by_status_and_pages_with_a_cursor(harness: ApiHarness):
    h = harness
    a = h.key("acme")
    ids = [
        h.client.post("/v1/jobs", json={"problem": {"question": f"q{i}"}}, headers=h.headers(a)).json()["id"]
        for i in range(5)
    ]
    for job_id in ids:
        _wait(h, a, job_id)
    seen, cursor = [], None
    while True:
        params = {"limit": 2, "status": "done", **({"cursor": cursor} if cursor else {})}
        page = h.client.get("/v1/jobs", params=params, headers=h.headers(a)).json()
        seen += [j["id"] for j in page["data"]]
        cursor = page["next_cursor"]
        if not page["has_more"]:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == 5
    assert h.client.get("/v1/jobs", params={"status": "failed"}, headers=h.headers(a)).json()["data"] == []


def test_cancel_stops_new_model_calls_and_records_the_state(harness: ApiHarness):
    h = harness
    a = h.key("acme")
    h.server.script = _slow(h.server.script)
    job_id = h.client.post("/v1/jobs", json={"problem": {"question": "[wf:chain] slow"}}, headers=h.headers(a)).json()[
        "id"
    ]
    deadline = time.monotonic() + 20
    while not any(c.last_user == "solve" for c in h.server.calls) and time.monotonic() < deadline:
        time.sleep(0.05)
    r = h.client.post(f"/v1/jobs/{job_id}/cancel", headers=h.headers(a))
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    calls = len(h.server.calls)
    time.sleep(2.0)  # the running step's call returns meanwhile; nothing new may start
    job = h.client.get(f"/v1/jobs/{job_id}", headers=h.headers(a)).json()
    assert len(h.server.calls) == calls and job["status"] == "cancelled"
    steps = [st["status"] for st in job["chains"][0]["rounds"][0]["steps"]]
    assert steps == ["cancelled", "skipped"]


def _slow(script):
    from tests.support.scripted_llm import Reply

    def slow(model, messages, body):
        reply = script(model, messages, body)
        if not model.endswith("conductor"):
            return Reply(reply.content, delay_s=1.0)
        return reply

    return slow


def test_quota_answers_429_with_retry_after(harness: ApiHarness):
    h = harness
    a = h.key("small", quotas=Quotas(max_concurrent_jobs=1))
    h.server.script = _slow(h.server.script)
    first = h.client.post("/v1/jobs", json={"problem": {"question": "one"}}, headers=h.headers(a))
    second = h.client.post("/v1/jobs", json={"problem": {"question": "two"}}, headers=h.headers(a))
    assert first.status_code == 201
    assert second.status_code == 429 and int(second.headers["Retry-After"]) >= 1
    assert second.json()["error"]["type"] == "rate_limit_error"


def test_chat_completion_and_its_stream(harness: ApiHarness):
    h = harness
    a = h.key("acme")
    body = {"model": "conductor", "messages": [{"role": "user", "content": "[wf:fanout] hi"}]}
    r = h.client.post("/v1/chat/completions", json=body, headers=h.headers(a))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["conductor"]["job_id"] == r.headers["x-conductor-job-id"]
    assert out["choices"][0]["message"]["content"] and out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["total_tokens"] > 0 and out["conductor"]["model_calls"] == 4
    with h.client.stream("POST", "/v1/chat/completions", json={**body, "stream": True}, headers=h.headers(a)) as s:
        lines = [line for line in s.iter_lines() if line.startswith("data: ")]
        job_id = s.headers["x-conductor-job-id"]
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert lines[-1] == "data: [DONE]" and chunks[0]["conductor"]["job_id"] == job_id
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == h.client.get(f"/v1/jobs/{job_id}", headers=h.headers(a)).json()["answer"]
