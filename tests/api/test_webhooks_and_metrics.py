"""Webhooks to a local receiver (Standard Webhooks signatures, retries with backoff, attempts
recorded, replay) and the Prometheus endpoint, on the embedded system."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fastapi.testclient import TestClient
from standardwebhooks import Webhook

from api.app import create_app
from conductor.app.tenants import create_key
from conductor.app.webhooks import deliveries
from conductor.config.settings import Settings
from conductor.store.models import Tenant
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool


class Receiver:
    """Answers 500 to the first `fail` requests, then 204; keeps every request."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.requests: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(500 if len(receiver.requests) <= receiver.fail else 204)
                self.send_header("content-length", "0")
                self.end_headers()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"


def test_a_receiver_that_fails_three_times_gets_the_signed_event_once_more(tmp_path, scripted):
    receiver = Receiver(fail=3)
    pool_file = write_pool(scripted_pool(scripted.base_url), tmp_path / "pool.yaml")
    settings = Settings(
        home=tmp_path, broker_url="memory://", pool_file=pool_file, recursion=False, webhook_backoff_s=0.1
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
