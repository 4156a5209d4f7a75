"""A backlog must not amplify: with no fault at all, work that waits behind a long `llm` queue is
not taken for lost. One `llm` worker, slow model calls, many jobs, beat sweeping every second
with a 2 s grace (the queue wait is ~10x the grace): every job ends done, and the `llm` worker
receives at most 1.5 run_step messages per step, and none for a join step, which runs in the
thread that released it (counted from Celery's own "received" log
lines, plus whatever is still queued at the end)."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import redis
from sqlalchemy import select

from conductor.store.models import Job, Step
from schedulers import health
from tests.integration.test_cluster import _client
from tests.support.cluster import cluster_env, workers, write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.workflows import planned_workers

pytestmark = pytest.mark.services

JOBS = 30  # fan-out workflows: 3 steps each, 90 model calls of 0.3 s on 2 threads (~14 s of queue, 7x the grace)
RECEIVED = re.compile(r"Task conductor\.run_step\[step-(\d+)\] received")


def test_a_backlog_on_one_llm_worker_drains_without_duplicate_messages(tmp_path, pg_url, redis_db):
    server = ScriptedLLMServer(planned_workers(0.3)).start()
    pool = scripted_pool(server.base_url)
    sweep = {"reaper_interval_s": "1", "ready_grace_s": "2", "step_lease_s": "40", "task_time_limit_s": "30"}
    env = cluster_env(tmp_path, redis_db, pg_url, write_pool(pool, tmp_path / "pool.yaml"), recursion="false", **sweep)
    service = _client(tmp_path, redis_db, pg_url, pool)
    try:
        with (
            workers(env, tmp_path, ["ctl"], queues="conductor,default", beat=True),
            workers(env, tmp_path, ["llm1"], queues="llm", concurrency=2),
        ):
            ids = [service.submit(service_problem(i))[0] for i in range(JOBS)]
            service.wait(ids, timeout=150)
            left_in_queue = redis.Redis.from_url(redis_db).llen("llm")
            reaper_age = health.redis_health(redis_db, reaper_interval_s=1, queues=())["reaper_last_run_s"]
        with service.sessions() as s:
            statuses = Counter(s.scalars(select(Job.status).where(Job.id.in_(ids))))
            rows = s.execute(select(Step.id, Step.dependencies, Step.status).where(Step.job_id.in_(ids))).all()
        step_ids = {str(r.id) for r in rows}
        # A join released by the last of its parents runs next in that worker's thread, no message.
        sent = {str(r.id) for r in rows if not r.dependencies}
        steps = len(step_ids)
        # This test's steps only: another test sharing the Redis database by chance must not count.
        received = Counter(i for i in RECEIVED.findall((tmp_path / "llm1.log").read_text()) if i in step_ids)
        messages = sum(received.values()) + left_in_queue
        print(f"{JOBS} jobs, {steps} steps, {messages} run_step messages ({messages / steps:.2f} per step)")
        assert statuses == {"done": JOBS}
        assert reaper_age is not None and reaper_age < 5, "beat's reaper swept throughout"
        assert {r.status for r in rows} == {"done"}
        assert set(received) == sent, "every step sent reached the llm worker, and no join was sent"
        assert messages <= 1.5 * steps, f"{messages} messages for {steps} steps: {received.most_common(3)}"
    finally:
        server.stop()


def service_problem(i: int):
    from conductor.domain.problem import Problem

    return Problem(question=f"[wf:fanout] backlog problem {i}")
