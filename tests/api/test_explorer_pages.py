"""The job explorer's pages over HTTP (no browser): who may look, what each page lists, and the
live fragments. An embedded system (SQLite, in-process worker) with the scripted model server."""

from __future__ import annotations

import time
from typing import Any

from conductor.app.tenants import revoke_key
from conductor.store.models import Checkpoint, utcnow
from tests.api.conftest import ApiHarness
from tests.support.api_deployment import batch_file


def _login(h: ApiHarness, key: str, next_: str = "/ui/jobs") -> Any:
    return h.client.post("/ui/login", data={"key": key, "next": next_}, follow_redirects=False)


def _wait_done(h: ApiHarness, key: str, job_id: str) -> dict[str, Any]:
    for _ in range(150):
        job = h.client.get(f"/v1/jobs/{job_id}", headers=h.headers(key)).json()
        if job["status"] == "done":
            return job  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


def test_pages_ask_for_a_key_and_the_cookie_is_scoped_and_hidden_from_scripts(harness: ApiHarness):
    h = harness
    r = h.client.get("/ui/jobs?status=done", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/ui/login?next=%2Fui%2Fjobs%3Fstatus%3Ddone"
    assert h.client.get("/ui/jobs/x/data").status_code == 401

    assert _login(h, "ck-not-a-key").status_code == 401
    assert "conductor_ui_key" not in h.client.cookies
    assert _login(h, h.key("acme", scopes=["chat"])).status_code == 401, "a key without the jobs scope cannot look"

    r = _login(h, h.key("acme"), next_="/ui/batches")
    assert r.status_code == 303 and r.headers["location"] == "/ui/batches"
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    assert h.client.get("/ui/jobs").status_code == 200


def test_login_never_redirects_off_the_explorer(harness: ApiHarness):
    key = harness.key("acme")
    for target in ("https://evil.example/", "//evil.example/ui/", "/v1/jobs", "/ui\\@evil"):
        assert _login(harness, key, next_=target).headers["location"] == "/ui/jobs"


def test_a_revoked_key_logs_the_browser_out(harness: ApiHarness):
    h = harness
    key = h.key("acme")
    _login(h, key)
    assert h.client.get("/ui/jobs", follow_redirects=False).status_code == 200
    revoke_key(h.client.app.state.api.sessions, key[:10])  # type: ignore[attr-defined]
    assert h.client.get("/ui/jobs", follow_redirects=False).status_code == 303


def test_jobs_filter_by_status_batch_and_text_and_page_with_a_cursor(harness: ApiHarness):
    h = harness
    key = h.key("acme")
    ids = [
        h.client.post(
            "/v1/jobs", json={"problem": {"question": f"[wf:single] word{i}"}}, headers=h.headers(key)
        ).json()["id"]
        for i in range(3)
    ]
    for job_id in ids:
        _wait_done(h, key, job_id)
    _login(h, key)

    def listed(url: str) -> list[str]:
        html = h.client.get(url).text
        return [i for i in ids if f'data-job="{i}"' in html]

    assert listed("/ui/jobs?q=word1") == [ids[1]]
    assert listed("/ui/jobs?status=done") == ids
    assert listed("/ui/jobs?status=failed") == []
    first = h.client.get("/ui/jobs?limit=2").text
    assert f'data-job="{ids[2]}"' in first and f'data-job="{ids[0]}"' not in first, "newest first"
    older = first.split('id="next-page" href="')[1].split('"')[0].replace("&amp;", "&")
    assert listed(older) == [ids[0]]


def test_a_batch_shows_progress_counts_tokens_and_cost(harness: ApiHarness):
    h = harness
    key = h.key("acme")
    file_id = h.client.post(
        "/v1/files", files={"file": ("in.jsonl", batch_file(3))}, data={"purpose": "batch"}, headers=h.headers(key)
    ).json()["id"]
    batch = h.client.post(
        "/v1/batches",
        json={"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"},
        headers=h.headers(key),
    ).json()
    _login(h, key)
    for _ in range(150):
        html = h.client.get("/ui/batches").text
        if "3/3" in html:
            break
        time.sleep(0.1)
    row = html.split(f'data-batch="{batch["id"]}"')[1].split("</tr>")[0]
    assert "3/3" in row and "done 3" in row and 'value="3"' in row
    assert "$0.0000" in row, "the scripted pool is free"
    fragment = h.client.get("/ui/batches?fragment=1")
    assert fragment.headers["x-live"] == "0" and "<html" not in fragment.text, "nothing left running: polling stops"

    other = h.key("globex")
    _login(h, other)
    assert f'data-batch="{batch["id"]}"' not in h.client.get("/ui/batches").text


def test_checkpoints_show_lineage_gate_decisions_and_the_training_curve(harness: ApiHarness):
    h = harness
    steps = [{"step": i, "loss": 1.0 / (i + 1), "reward_mean": i / 4} for i in range(4)]
    gate = {"passed": False, "reasons": ["accuracy worse: 0.10 vs 0.20"], "candidate": {}, "active": {}}
    with h.client.app.state.api.sessions.begin() as s:  # type: ignore[attr-defined]
        s.add(Checkpoint(id="warmup-1", base_model="smol", status="active", stage="warmup", promoted_at=utcnow()))
        s.add(Checkpoint(id="grpo-2", parent_id="warmup-1", base_model="smol", status="rejected", stage="grpo",
                         gate=gate, metrics={"train_steps": steps}))  # fmt: skip
    _login(h, h.key("acme"))
    html = h.client.get("/ui/checkpoints").text
    assert html.index('data-checkpoint="warmup-1"') < html.index('data-checkpoint="grpo-2" data-parent="warmup-1"')
    assert "rejected" in html and "accuracy worse: 0.10 vs 0.20" in html
    points = html.split('class="reward" points="')[1].split('"')[0].split()
    assert len(points) == 4
