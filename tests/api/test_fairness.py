"""Fair scheduling across tenants through the API: tenant A's 2,000-line batch is admitted by the
feeder a few jobs at a time, so tenant B's 20 interactive requests (and A's own chat request)
overtake it instead of queueing behind it. Real API and worker processes, Redis + PostgreSQL,
scripted model server at a fixed latency."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import func, select

from conductor.domain.states import TERMINAL_JOB
from conductor.store.models import Job
from tests.conftest import default_script
from tests.support.api_deployment import Deployment, batch_file, deploy

pytestmark = pytest.mark.services

A_JOBS, B_JOBS = 2000, 20


@pytest.fixture
def deployment(tmp_path: Path, pg_url: str, redis_db: str) -> Iterator[Deployment]:
    # A small in-flight cap: the broker never holds more than a few jobs of anyone's backlog.
    with deploy(tmp_path, pg_url, redis_db, default_script(worker_delay=0.05), max_in_flight_jobs="16") as d:
        yield d


def _batch_file(n: int) -> bytes:
    return batch_file(n, workflow="single", prefix="a")


def test_tenant_b_finishes_before_tenant_a_batch_is_a_quarter_done(deployment: Deployment):
    a = deployment.client(deployment.key("tenant-a"))
    b = deployment.client(deployment.key("tenant-b"))
    f = a.files.create(file=("a.jsonl", io.BytesIO(_batch_file(A_JOBS))), purpose="batch")
    batch = a.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.monotonic() + 60
    while batch.status == "validating" and time.monotonic() < deadline:
        time.sleep(0.2)
        batch = a.batches.retrieve(batch.id)
    assert batch.status == "in_progress" and batch.request_counts.total == A_JOBS

    def chat(client: object, i: int) -> str:
        raw = client.chat.completions.with_raw_response.create(  # type: ignore[attr-defined]
            model="conductor", messages=[{"role": "user", "content": f"[wf:single] interactive {i}"}]
        )
        assert raw.parse().choices[0].message.content
        return str(raw.headers["x-conductor-job-id"])

    with ThreadPoolExecutor(B_JOBS + 1) as pool:
        own = pool.submit(chat, a, -1)  # A's own interactive request overtakes A's batch too
        b_ids = list(pool.map(lambda i: chat(b, i), range(B_JOBS)))
        a_chat = own.result()

    with deployment.runtime.sessions() as s:
        interactive = list(s.scalars(select(Job).where(Job.id.in_([*b_ids, a_chat]))))
        assert len(interactive) == B_JOBS + 1 and all(j.status == "done" for j in interactive)
        last_b = max(j.finished_at for j in interactive if j.id != a_chat)
        a_done_then = s.scalar(
            select(func.count()).where(
                Job.batch_id == batch.id,
                Job.status.in_([st.value for st in TERMINAL_JOB]),
                Job.finished_at <= last_b,
            )
        )
        a_chat_job = next(j for j in interactive if j.id == a_chat)
        a_before_own_chat = s.scalar(
            select(func.count()).where(Job.batch_id == batch.id, Job.finished_at <= a_chat_job.finished_at)
        )
        a_waiting = s.scalar(select(func.count()).where(Job.batch_id == batch.id, Job.status == "waiting"))
    # The rest of A's batch is not this test's business: the deployment is torn down with it.
    assert a_done_then < A_JOBS // 4, f"B finished after {a_done_then} of A's {A_JOBS} jobs"
    assert a_before_own_chat < A_JOBS // 4
    assert a_waiting > A_JOBS // 2, "A's batch is admitted progressively, not all at once"
