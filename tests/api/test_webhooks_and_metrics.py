"""Webhooks to a local receiver (Standard Webhooks signatures, retries with backoff, attempts
recorded, replay) and the Prometheus endpoint, on the embedded system."""

from __future__ import annotations

import json
import socket
import time

from fastapi.testclient import TestClient
from standardwebhooks import Webhook

from api.app import create_app
from conductor.app.tenants import create_key
from conductor.app.webhooks import deliveries
from conductor.config.settings import Settings
from conductor.store.models import Tenant
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.webhook_receiver import Receiver


def test_a_receiver_that_fails_three_times_gets_the_signed_event_once_more(tmp_path, scripted):
    receiver = Receiver(fail=3)
    pool_file = write_pool(scripted_pool(scripted.base_url), tmp_path / "pool.yaml")
    settings = Settings(
        home=tmp_path,
        broker_url="memory://",
        pool_file=pool_file,
        recursion=False,
        webhook_backoff_s=0.1,
        webhook_allow=("127.0.0.1",),  # the receiver is on loopback, refused by default
    )
    try:
        with TestClient(create_app(settings)) as client:
            sessions = client.app.state.api.sessions  # type: ignore[attr-defined]
            key, tenant_id = create_key(sessions, "acme", webhook_url=receiver.url)
            r = client.post(
                "/v1/jobs",
                json={"problem": {"question": "[wf:single] hook me"}},
                headers={"Authorization": f"Bearer {key}"},
            )
            job_id = r.json()["id"]
            deadline = time.monotonic() + 30
            while len(receiver.requests) < 4 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(0.5)  # nothing more may come after the success
            with sessions() as s:
                secret = s.get_one(Tenant, tenant_id).webhook_secret
            metrics = client.get("/metrics").text
    finally:
        receiver.httpd.shutdown()
    assert len(receiver.requests) == 4
    headers, body = receiver.requests[-1]
    event = Webhook(secret).verify(body, headers)  # the receiver's own check
    assert event["type"] == "job.done" and event["data"]["id"] == job_id
    assert len({h["webhook-id"] for h, _ in receiver.requests}) == 1  # one event, delivered again
    (record,) = deliveries(sessions, tenant_id, job_id)
    assert record["status"] == "delivered"
    assert [a["status_code"] for a in record["attempts"]] == [500, 500, 500, 204]
    assert 'conductor_jobs{status="done"} 1.0' in metrics
    assert "conductor_webhook_failures_total 3.0" in metrics
    assert "conductor_step_latency_seconds_bucket" in metrics
    assert json.loads(body)["data"]["status"] == "done"


def _settings(tmp_path, scripted, **kwargs) -> Settings:
    """Receivers here listen on loopback, which webhooks may reach only when allowed."""
    pool_file = write_pool(scripted_pool(scripted.base_url), tmp_path / "pool.yaml")
    kwargs.setdefault("webhook_allow", ("127.0.0.0/8",))
    return Settings(home=tmp_path, broker_url="memory://", pool_file=pool_file, recursion=False, **kwargs)


def _run_jobs(client: TestClient, key: str, n: int, tag: str) -> float:
    """Submit `n` jobs and wait until all are done; the seconds it took."""
    headers = {"Authorization": f"Bearer {key}"}
    started = time.monotonic()
    ids = [
        client.post("/v1/jobs", json={"problem": {"question": f"[wf:single] {tag} {i}"}}, headers=headers).json()["id"]
        for i in range(n)
    ]
    deadline = started + 60
    while time.monotonic() < deadline:
        if all(client.get(f"/v1/jobs/{i}", headers=headers).json()["status"] == "done" for i in ids):
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{tag}: jobs unfinished after 60 s")


def test_a_receiver_that_never_answers_does_not_slow_the_pipeline(tmp_path, scripted):
    hung = socket.socket()  # accepts connections (the kernel's backlog) and never answers
    hung.bind(("127.0.0.1", 0))
    hung.listen(256)
    url = f"http://127.0.0.1:{hung.getsockname()[1]}/hook"
    settings = _settings(
        tmp_path, scripted, webhook_timeout_s=1.5, webhook_backoff_s=0.2, webhook_max_attempts=3, embedded_concurrency=4
    )
    n = 12
    try:
        with TestClient(create_app(settings)) as client:
            sessions = client.app.state.api.sessions  # type: ignore[attr-defined]
            plain, _ = create_key(sessions, "plain")
            hooked, hooked_id = create_key(sessions, "hooked", webhook_url=url)
            _run_jobs(client, plain, n, "warm-up")
            baseline = _run_jobs(client, plain, n, "baseline")
            with_hooks = _run_jobs(client, hooked, n, "hooked")  # each ends in a delivery that hangs
            during = _run_jobs(client, plain, n, "during")  # while those deliveries time out and retry
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                rows = deliveries(sessions, hooked_id)
                if len(rows) == n and all(len(r["attempts"]) >= 2 for r in rows):
                    break
                time.sleep(0.2)
    finally:
        hung.close()
    # Twelve hung attempts of 1.5 s each, retried, would hold the 4 worker threads for ~10 s.
    assert with_hooks < 2 * baseline + 1.0, (baseline, with_hooks)
    assert during < 2 * baseline + 1.0, (baseline, during)
    assert len(rows) == n and all(r["status"] in ("pending", "failed") for r in rows)
    assert all(len(r["attempts"]) >= 2 for r in rows), "timed-out deliveries are retried"
    assert all(a["error"] == "timed out" for r in rows for a in r["attempts"])


def test_a_delivery_is_replayed_by_its_tenant_only(tmp_path, scripted):
    receiver = Receiver(fail=0)
    try:
        with TestClient(create_app(_settings(tmp_path, scripted))) as client:
            sessions = client.app.state.api.sessions  # type: ignore[attr-defined]
            key, _ = create_key(sessions, "acme", webhook_url=receiver.url)
            other, _ = create_key(sessions, "other")
            auth, other_auth = {"Authorization": f"Bearer {key}"}, {"Authorization": f"Bearer {other}"}
            job_id = client.post("/v1/jobs", json={"problem": {"question": "[wf:single] hi"}}, headers=auth).json()[
                "id"
            ]
            deadline = time.monotonic() + 30
            while not receiver.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            listed = client.get("/v1/webhooks/deliveries", params={"subject_id": job_id}, headers=auth).json()["data"]
            (delivery,) = listed
            assert delivery["status"] == "delivered" and [a["status_code"] for a in delivery["attempts"]] == [204]
            path = f"/v1/webhooks/deliveries/{delivery['id']}"
            assert client.post(f"{path}/replay", headers=other_auth).status_code == 404
            assert client.get(path, headers=other_auth).status_code == 404
            assert client.get("/v1/webhooks/deliveries", headers=other_auth).json()["data"] == []
            r = client.post(f"{path}/replay", headers=auth)
            assert r.status_code == 202 and r.json()["status"] in ("pending", "delivered")
            while len(receiver.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)
            again = client.get(path, headers=auth).json()
    finally:
        receiver.httpd.shutdown()
    assert len(receiver.requests) == 2
    assert receiver.requests[0][0]["webhook-id"] == receiver.requests[1][0]["webhook-id"] == delivery["id"]
    assert again["status"] == "delivered" and [a["status_code"] for a in again["attempts"]] == [204, 204]
