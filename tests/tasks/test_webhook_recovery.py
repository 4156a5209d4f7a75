"""A webhook attempt lost with its process (the delivery stays `pending`, nothing queued) is sent
again by the reaper once overdue, under the delivery's backoff, and only once per overdue."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import update

from conductor.app.webhooks import deliveries, job_event
from conductor.store.models import Job, Tenant, WebhookDelivery
from tests.api.test_webhooks_and_metrics import Receiver
from tests.support.pools import scripted_pool
from tests.support.system import embedded_system


def test_a_pending_delivery_whose_process_died_is_sent_again_by_the_reaper(tmp_path):
    receiver = Receiver(fail=1)  # the re-sent attempt fails once: its retry follows the backoff
    pool = scripted_pool("http://127.0.0.1:9/v1")
    knobs = {"reaper_interval_s": 0.3, "ready_grace_s": 1.0, "webhook_backoff_s": 0.2, "webhook_allow": ("127.0.0.1",)}
    with embedded_system(tmp_path, pool, **knobs) as sys:
        sessions = sys.runtime.sessions
        with sessions.begin() as s:
            s.add(Tenant(id="acme", name="acme", webhook_url=receiver.url))
            s.flush()
            s.add(Job(id="j1", tenant_id="acme", status="done", answer="42", problem={"question": "q"}))
        delivery_id = job_event(sessions, "j1")  # recorded; the process then died before sending it
        assert delivery_id is not None
        with sessions.begin() as s:
            past = datetime.now(UTC) - timedelta(seconds=5)
            s.execute(update(WebhookDelivery).where(WebhookDelivery.id == delivery_id).values(created_at=past))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and deliveries(sessions, "acme")[0]["status"] != "delivered":
            time.sleep(0.1)
        time.sleep(1.5)  # several more sweeps: a delivered event is never sent again
    (d,) = deliveries(sessions, "acme")
    assert d["status"] == "delivered"
    assert [a["status_code"] for a in d["attempts"]] == [500, 204]
    assert len(receiver.requests) == 2
    assert {h["webhook-id"] for h, _ in receiver.requests} == {delivery_id}
    receiver.httpd.shutdown()
