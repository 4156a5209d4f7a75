"""Cancelling a batch while workers are busy with it: the cancel's updates meet the engine's
transitions on the same job, chain, round and step rows. Real API and worker processes,
Redis + PostgreSQL, scripted model server; a cancel must never answer 500 (a deadlock) and must
leave every job ended, with no late result bringing a cancelled one back."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
from sqlalchemy import ColumnElement, func, select

from conductor.domain.states import TERMINAL_JOB, ChainStatus, RoundStatus, StepStatus
from conductor.store.models import Chain, Job, Round, Step
from tests.conftest import default_script
from tests.support.api_deployment import Deployment, batch_file, deploy

pytestmark = pytest.mark.services

JOBS = 600
TERMINAL = [s.value for s in TERMINAL_JOB]


@pytest.fixture
def deployment(tmp_path: Path, pg_url: str, redis_db: str) -> Iterator[Deployment]:
    # Many jobs in flight, each a fan-out of three steps that finish within milliseconds of
    # each other: workers are always inside a transition when the cancel lands.
    with deploy(
        tmp_path, pg_url, redis_db, default_script(worker_delay=0.01), concurrency=8, max_in_flight_jobs="200"
    ) as d:
        yield d


def _batch_file(n: int) -> bytes:
    return batch_file(n, workflow="fanout", prefix="r")


def _count(d: Deployment, *where: ColumnElement[bool]) -> int:
    with d.runtime.sessions() as s:
        return s.scalar(select(func.count()).select_from(Job).where(*where)) or 0


def test_cancelling_a_batch_under_load_ends_every_job_and_never_fails(deployment: Deployment):
    client = deployment.client(deployment.key("acme"))
    f = client.files.create(file=("in.jsonl", io.BytesIO(_batch_file(JOBS))), purpose="batch")
    batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.monotonic() + 120
    # Every line read (a cancel while validating stops the read: those lines never become requests),
    # and jobs already ending: a cancel under load.
    while (
        _count(deployment, Job.batch_id == batch.id, Job.status.in_(TERMINAL)) < 20
        or client.batches.retrieve(batch.id).status != "in_progress"
    ):
        assert time.monotonic() < deadline, deployment.api.tail()
        time.sleep(0.2)

    # Two clients cancel at once (a retry after a slow answer looks like this): both succeed.
    with ThreadPoolExecutor(2) as pool:
        try:
            answers = list(pool.map(lambda _: client.batches.cancel(batch.id), range(2)))
        except openai.InternalServerError as exc:
            time.sleep(1.0)  # the API logs the traceback after it has answered
            pytest.fail(f"cancel answered {exc.status_code}:\n{deployment.api.tail(60)}")
    assert all(a.status in ("cancelling", "finalizing", "cancelled") for a in answers), [a.status for a in answers]

    deadline = time.monotonic() + 120
    while batch.status != "cancelled":
        assert time.monotonic() < deadline, f"batch is {batch.status}:\n{deployment.api.tail()}"
        time.sleep(0.5)
        batch = client.batches.retrieve(batch.id)
    assert client.batches.cancel(batch.id).status == "cancelled"  # and once more, when it is all over
    counts = batch.request_counts
    assert counts.total == JOBS and counts.completed + counts.failed == JOBS and counts.failed > 0

    time.sleep(2.0)  # results of steps that were running when the cancel landed arrive now
    with deployment.runtime.sessions() as s:
        statuses = dict(
            s.execute(select(Job.status, func.count()).where(Job.batch_id == batch.id).group_by(Job.status))
            .tuples()
            .all()
        )
        cancelled = select(Job.id).where(Job.batch_id == batch.id, Job.status == "cancelled").scalar_subquery()
        live_steps = s.scalar(
            select(func.count()).where(
                Step.job_id.in_(cancelled),
                Step.status.in_([StepStatus.RUNNING.value, StepStatus.READY.value, StepStatus.PENDING.value]),
            )
        )
        live_rounds = s.scalar(
            select(func.count()).where(
                Round.job_id.in_(cancelled),
                Round.status.in_([RoundStatus.PLANNING.value, RoundStatus.RUNNING.value]),
            )
        )
        live_chains = s.scalar(
            select(func.count()).where(Chain.job_id.in_(cancelled), Chain.status == ChainStatus.RUNNING.value)
        )
    assert set(statuses) <= set(TERMINAL) and statuses.get("cancelled", 0) == counts.failed, statuses
    assert statuses.get("done", 0) == counts.completed
    assert (live_steps, live_rounds, live_chains) == (0, 0, 0)
