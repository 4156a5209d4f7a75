"""The backlog rule with the real SmolLM2-135M model in the worker process: one `llm` worker with one
thread, a few fan-out jobs whose steps wait far longer than the reaper's 2 s grace, beat sweeping
every second. Every job ends done, and the worker receives at most 1.5 run_step messages per step,
and none for a join step, which runs in the thread that released it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import redis
import yaml
from sqlalchemy import select

from conductor.app.service import JobSpec
from conductor.config.pool import Pool
from conductor.domain.problem import Problem
from conductor.store.models import Job, Step
from tests.conftest import MODEL_HOME
from tests.integration.test_backlog import RECEIVED
from tests.integration.test_cluster import _client
from tests.support.cluster import REPO, cluster_env, workers, write_pool

pytestmark = [pytest.mark.slow, pytest.mark.services, pytest.mark.timeout(800)]

JOBS = 3  # 9 real model calls on one thread: the last waits ~8x a call, far past the 2 s grace
#: Two parallel model steps and one that combines them: the same shape as the scripted backlog test.
FANOUT = {"model_id": [0, 1, 0], "subtasks": ["State the sum.", "State the product.", "Combine both."], "access_list": [[], [], [0, 1]]}  # fmt: skip


def _local_pool(home: Path) -> Pool:
    if not (MODEL_HOME / "models" / "smollm2-135m-instruct" / "config.json").exists():
        pytest.fail("the local model is missing: run `make model` (the test command does)")
    (home / "models").symlink_to(MODEL_HOME / "models")
    raw = yaml.safe_load((REPO / "conductor" / "config" / "pools" / "local.yaml").read_text())
    for w in raw["workers"]:
        w["max_tokens"] = 16  # short answers: the queue, not the model, is under test
    return Pool.model_validate(raw)


def test_a_real_model_backlog_drains_without_duplicate_messages(tmp_path, pg_url, redis_db):
    pool = _local_pool(tmp_path)
    sweep = {"reaper_interval_s": "1", "ready_grace_s": "2", "step_lease_s": "240", "task_time_limit_s": "200"}
    env = cluster_env(tmp_path, redis_db, pg_url, write_pool(pool, tmp_path / "pool.yaml"), recursion="false", **sweep)
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    service = _client(tmp_path, redis_db, pg_url, pool)
    with (
        workers(env, tmp_path, ["ctl"], queues="conductor,default", concurrency=2, beat=True),
        workers(env, tmp_path, ["llm1"], queues="llm", concurrency=1),
    ):
        spec = JobSpec(options={"workflow": FANOUT})
        ids = [service.submit(Problem(question=f"{i + 2} and {i + 3}"), spec)[0] for i in range(JOBS)]
        service.wait(ids, timeout=700)
        left_in_queue = redis.Redis.from_url(redis_db).llen("llm")
    with service.sessions() as s:
        statuses = Counter(s.scalars(select(Job.status).where(Job.id.in_(ids))))
        rows = s.execute(select(Step.id, Step.dependencies, Step.status).where(Step.job_id.in_(ids))).all()
        step_ids = {str(r.id) for r in rows}
        steps = len(step_ids)
        answers = list(s.scalars(select(Job.answer).where(Job.id.in_(ids))))
    # This test's steps only: another test sharing the Redis database by chance must not count.
    received = Counter(i for i in RECEIVED.findall((tmp_path / "llm1.log").read_text()) if i in step_ids)
    # A join released by the last of its parents runs next in that worker's thread, no message.
    sent = {str(r.id) for r in rows if not r.dependencies}
    messages = sum(received.values()) + left_in_queue
    print(
        f"{JOBS} real-model jobs, {steps} steps, {messages} run_step messages ({messages / max(steps, 1):.2f} per step)"
    )
    assert statuses == {"done": JOBS}
    assert all(a and a.strip() for a in answers), "the real model answered every job"
    assert steps == 3 * JOBS and {r.status for r in rows} == {"done"}
    assert set(received) == sent, "every step sent reached the llm worker, and no join was sent"
    assert messages <= 1.5 * steps, f"{messages} messages for {steps} steps: {received.most_common(3)}"
