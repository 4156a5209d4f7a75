"""The API process holds no batch work: a real `conductor api` SIGKILLed right after an upload (or
before it could send the read at all) loses no line, and a batch expires with no API process
running. The official `openai` client reads the outcome from the restarted API."""

from __future__ import annotations

import io
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from conductor.app.batches.batch_api import Batches
from conductor.store.models import Batch, Job
from conductor.system import service_for
from tests.conductor.app.batches.test_batch_reader import NoQueue
from tests.conftest import default_script
from tests.support.api_deployment import Deployment, batch_file, deploy

pytestmark = pytest.mark.services

TERMINAL = ("completed", "failed", "expired", "cancelled")


def _status(d: Deployment, batch_id: str) -> str:
    with d.runtime.sessions() as s:
        return str(s.scalar(select(Batch.status).where(Batch.id == batch_id)))


def _wait_status(d: Deployment, batch_id: str, want: tuple[str, ...], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while (status := _status(d, batch_id)) not in want and time.monotonic() < deadline:
        time.sleep(0.3)
    return status


def _kill_api(d: Deployment) -> None:
    d.api.kill()  # SIGKILL: no shutdown hook, no background task, nothing finishes
    d.api.stop()


def test_an_api_killed_right_after_an_upload_loses_no_line(tmp_path: Path, pg_url: str, redis_db: str):
    with deploy(tmp_path, pg_url, redis_db, default_script(worker_delay=0.05), ready_grace_s="2") as d:
        client = d.client(d.key("acme"))
        f = client.files.create(file=("in.jsonl", io.BytesIO(batch_file(40))), purpose="batch")
        sent = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        _kill_api(d)
        # A second batch whose API died between writing the row and sending the read: beat's sweep
        # finds it validating with no message queued, and sends the read itself.
        orphan = Batches(service_for(d.runtime, NoQueue().submit), send=None).create(
            _tenant_of(d, sent.id), f.id, endpoint="/v1/chat/completions", window="24h", metadata=None
        )
        assert _wait_status(d, sent.id, TERMINAL, 120) == "completed"  # no API process meanwhile
        assert _wait_status(d, orphan.id, TERMINAL, 120) == "completed"
        d.start_api()
        for batch_id in (sent.id, orphan.id):
            batch = client.batches.retrieve(batch_id)
            assert batch.status == "completed", d.api.tail()
            counts = batch.request_counts
            assert (counts.total, counts.completed, counts.failed) == (40, 40, 0)
            out = [json.loads(x) for x in client.files.content(batch.output_file_id).text.splitlines()]
            assert [o["custom_id"] for o in out] == [f"r{i}" for i in range(40)]  # every line, in input order
            assert all(o["response"]["status_code"] == 200 for o in out)
        with d.runtime.sessions() as s:
            sends = s.scalar(select(Batch.sends).where(Batch.id == orphan.id))
            jobs = s.scalar(select(func.count()).select_from(Job).where(Job.batch_id.in_([sent.id, orphan.id])))
        assert sends == 1, "the orphan's read was sent once by beat, not on every sweep"
        assert jobs == 80


def test_a_batch_expires_with_no_api_process_running(tmp_path: Path, pg_url: str, redis_db: str):
    with deploy(tmp_path, pg_url, redis_db, default_script(worker_delay=2.0), max_in_flight_jobs="2") as d:
        client = d.client(d.key("acme"))
        f = client.files.create(file=("in.jsonl", io.BytesIO(batch_file(12))), purpose="batch")
        batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
        assert _wait_status(d, batch.id, ("in_progress",), 60) == "in_progress"
        _kill_api(d)
        with d.runtime.sessions.begin() as s:  # the completion window runs out while no API runs
            s.execute(update(Batch).where(Batch.id == batch.id).values(expires_at=datetime.now(UTC)))
        assert _wait_status(d, batch.id, TERMINAL, 60) == "expired"
        d.start_api()
        seen = client.batches.retrieve(batch.id)
        counts = seen.request_counts
        assert seen.status == "expired" and seen.expired_at is not None
        assert counts.total == 12 and counts.completed + counts.failed == 12 and counts.failed > 0
        errors = [json.loads(x) for x in client.files.content(seen.error_file_id).text.splitlines()]
        assert len(errors) == counts.failed and {e["error"]["code"] for e in errors} == {"batch_expired"}


def _tenant_of(d: Deployment, batch_id: str) -> str:
    with d.runtime.sessions() as s:
        return str(s.scalar(select(Batch.tenant_id).where(Batch.id == batch_id)))
