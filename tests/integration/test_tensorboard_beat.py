"""Training curves where ML people look, from the production loop: a retraining cycle that beat starts
(Redis, PostgreSQL, worker processes, the `train` queue) writes TensorBoard event files under
`$CONDUCTOR_HOME/tensorboard/cycles`, read back here with TensorBoard's own reader.

The cycle is started by beat's retrain check on real rewarded traces (scored by the `reward` queue) and
skipped for too few groups with reward variance, so no model is trained: its one point per cycle (why it
did not train, and the data's health) is what is checked. A cycle's optimizer steps on TensorBoard are
checked where a real cycle trains (`tests/integration/test_production_retraining.py`, slow)."""

from __future__ import annotations

import pytest

from conductor.app.service import JobSpec
from conductor.domain.problem import Problem
from tests.conftest import default_script
from tests.integration.test_cluster import _client
from tests.reward_pipeline.training.test_health import read_board
from tests.support.cluster import cluster_env, workers, write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.waiting import ended_cycle, wait_for

pytestmark = pytest.mark.services


def test_a_cycle_beat_starts_writes_its_point_to_tensorboard(tmp_path, pg_url, redis_db):
    server = ScriptedLLMServer(default_script(), prompt_token_ids=True).start()  # rounds a trainer can read
    pool = scripted_pool(server.base_url)
    env = cluster_env(
        tmp_path,
        redis_db,
        pg_url,
        write_pool(pool, tmp_path / "pool.yaml"),
        recursion="false",
        retrain_enabled="true",
        retrain_check_s="1",
        retrain_min_new_traces="4",
        retrain_min_groups="50",
    )
    service = _client(tmp_path, redis_db, pg_url, pool)
    try:
        with workers(env, tmp_path, ["w1"], queues="conductor,llm,default,reward,train", beat=True):
            # Two samples each: a group of two rewarded rounds per job (no variance: the scripted worker is wrong).
            jobs = [
                service.submit(
                    Problem(question=f"[wf:single] What is {n} + 1?", answer=str(n + 1)), JobSpec(samples=2)
                )[0]
                for n in (1, 2)
            ]
            service.wait(jobs, timeout=60)
            cycle = wait_for("beat to start a cycle that ends", ended_cycle(service.sessions), 90)
    finally:
        server.stop()

    assert (cycle.trigger, cycle.status, cycle.error) == ("beat", "skipped", None), cycle.stats
    assert cycle.stats["skipped"].startswith("0 groups with reward variance")
    # The trainer's process wrote them under the deployment's home, one point at the cycle's id.
    board = read_board(tmp_path / "tensorboard" / "cycles")
    assert board["cycle/status/skipped"] == [(cycle.id, 1.0)] and board["cycle/status/done"] == [(cycle.id, 0.0)]
    # The data's health as stored with the cycle: two groups of two verifier-scored rounds, none with variance.
    health = cycle.stats["health"]
    assert board["cycle/health/groups"] == [(cycle.id, float(health["groups"]))] == [(cycle.id, 2.0)]
    assert board["cycle/health/zero_variance_fraction"] == [(cycle.id, 1.0)]
    assert board["cycle/health/reward_by_source/verifier/rows"] == [(cycle.id, 4.0)]
    assert board["cycle/health/reward_by_source/verifier/mean"] == [
        (cycle.id, health["reward_by_source"]["verifier"]["mean"])
    ]
