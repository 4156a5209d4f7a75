"""Every model slot busy (issue 30). Work first: a task that makes steps runnable runs one of them next
in its own thread, with no broker hop, and sends the rest to the queue for other threads (a released
step waiting in the queue while the thread that released it sits idle is a model slot lost); a host kept
for Conductor calls (`-Q conductor,default`) runs none: it sends every step
(tests/integration/test_backlog.py). Call slots: `conductor worker -c N` keeps N calls in flight on more
threads than that."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import select

from conductor.store.models import Job, Step
from tests.integration.test_cluster import _client
from tests.support.cluster import cluster_env, workers, write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.workflows import planned_workers

pytestmark = pytest.mark.services

JOBS = 8
RECEIVED = re.compile(r"Task conductor\.run_step\[step-(\d+)\] received")


def test_of_the_steps_a_plan_releases_one_runs_in_the_planning_thread_and_the_join_in_its_releasers(
    tmp_path, pg_url, redis_db
):
    with _deployment(tmp_path, pg_url, redis_db, delay_s=0.05) as (env, service, _):
        with workers(env, tmp_path, ["all"], queues="conductor,llm,default", concurrency=4):
            ids = [service.submit(_problem(i))[0] for i in range(JOBS)]
            service.wait(ids, timeout=120)
        with service.sessions() as s:
            statuses = Counter(s.scalars(select(Job.status).where(Job.id.in_(ids))))
            rows = s.execute(select(Step.id, Step.job_id, Step.dependencies).where(Step.job_id.in_(ids))).all()
        received = Counter(i for i in RECEIVED.findall((tmp_path / "all.log").read_text()))
        assert statuses == {"done": JOBS}
        roots = {str(r.id): r.job_id for r in rows if not r.dependencies}
        joins = {str(r.id) for r in rows if r.dependencies}
        assert not joins & set(received), "a join runs in the thread that released it"
        per_job = Counter(roots[i] for i in received if i in roots)
        # Each plan releases two parallel steps: one runs where the plan ran, the other is sent.
        assert sorted(per_job.values()) == [1] * JOBS, per_job
        assert max(received.values()) == 1, "no step was sent twice"


@contextmanager
def _deployment(tmp_path: Path, pg_url: str, redis_db: str, *, delay_s: float) -> Iterator[tuple]:
    """Workers' environment, a submitting service, and the scripted server (workers answer after `delay_s`)."""
    server = ScriptedLLMServer(planned_workers(delay_s)).start()
    pool = scripted_pool(server.base_url)
    env = cluster_env(tmp_path, redis_db, pg_url, write_pool(pool, tmp_path / "pool.yaml"), recursion="false")
    try:
        yield env, _client(tmp_path, redis_db, pg_url, pool), server
    finally:
        server.stop()


def _problem(i: int, workflow: str = "fanout"):
    from conductor.domain.problem import Problem

    return Problem(question=f"[wf:{workflow}] work-first problem {i}")


def test_a_worker_holds_c_model_calls_in_flight_on_more_threads(tmp_path, pg_url, redis_db):
    """`conductor worker -c 2`: two call slots, and a spare thread (CONDUCTOR_SPARE_THREAD_SHARE 0.5)
    that records and leases while the others call; never a third call in flight."""
    with _deployment(tmp_path, pg_url, redis_db, delay_s=0.3) as (env, service, server):
        with workers(env, tmp_path, ["w"], queues="conductor,llm,default", concurrency=2):
            ids = [service.submit(_problem(i, "fanout0"))[0] for i in range(6)]
            service.wait(ids, timeout=120)
        with service.sessions() as s:
            assert set(s.scalars(select(Job.status).where(Job.id.in_(ids)))) == {"done"}
        assert re.search(r"concurrency:\s+3 \(thread", (tmp_path / "w.log").read_text()), "2 slots + 1 spare thread"
        assert server.max_in_flight == 2
