"""Production shape: Redis broker, PostgreSQL store, separate worker processes, beat's reaper."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from sqlalchemy import select

from conductor.app.service import Service
from conductor.config.settings import Settings
from conductor.domain.problem import Problem
from conductor.runtime import Runtime
from conductor.store.models import Job, Step
from conductor.system import service_for
from tasks.app import create_app
from tasks.dispatch import Dispatcher
from tests.conftest import default_script
from tests.support.cluster import cluster_env, workers, write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.worker_kill import CHAIN_QUESTION, FAST_REAPER, kill_mid_call, slow_first_step

pytestmark = pytest.mark.services


def _client(home, broker, db, pool) -> Service:
    settings = Settings(home=home, broker_url=broker, database_url=db)
    runtime = Runtime(settings, pool=pool)
    app = create_app(settings, runtime)
    runtime.migrate()
    return service_for(runtime, Dispatcher(app).submit)


def test_a_batch_of_twenty_mixed_workflows_completes_on_two_worker_processes(tmp_path, pg_url, redis_db):
    server = ScriptedLLMServer(default_script(worker_delay=0.2)).start()
    pool = scripted_pool(server.base_url, fallback="beta")
    pool_file = write_pool(pool, tmp_path / "pool.yaml")
    env = cluster_env(tmp_path, redis_db, pg_url, pool_file, recursion="true", max_rounds="2")
    service = _client(tmp_path, redis_db, pg_url, pool)
    kinds = ["fanout", "chain", "single", "wide"]
    rng = random.Random(7)
    try:
        with workers(env, tmp_path, ["w1", "w2"]) as procs:
            ids = [service.submit(Problem(question=f"[wf:{rng.choice(kinds)}] problem {i}"))[0] for i in range(20)]
            service.wait(ids, timeout=180)
            with service.sessions() as s:
                jobs = s.scalars(select(Job).where(Job.id.in_(ids))).all()
                assert Counter(j.status for j in jobs) == {"done": 20}, [j.error for j in jobs]
                steps = s.scalars(select(Step).where(Step.job_id.in_(ids))).all()
                assert all(st.status == "done" and st.output for st in steps)
                by_worker = Counter(st.lease_holder.split("@")[0] for st in steps)
            assert set(by_worker) == {"w1", "w2"}, f"both worker processes should take steps: {by_worker}"
            assert all(p.popen.poll() is None for p in procs.values())
    finally:
        server.stop()


def test_a_worker_killed_mid_step_is_survived_and_each_output_stored_once(tmp_path, pg_url, redis_db):
    server = ScriptedLLMServer(slow_first_step).start()
    pool = scripted_pool(server.base_url)
    pool_file = write_pool(pool, tmp_path / "pool.yaml")
    env = cluster_env(
        tmp_path,
        redis_db,
        pg_url,
        pool_file,
        recursion="false",
        **FAST_REAPER,
    )
    service = _client(tmp_path, redis_db, pg_url, pool)
    try:
        with workers(env, tmp_path, ["w1", "w2"], beat=True) as procs:
            job_id, _ = service.submit(Problem(question=CHAIN_QUESTION))
            victim = kill_mid_call(service.sessions, job_id, procs)

            service.wait([job_id], timeout=120)
            view = service.job(job_id)
            assert view["status"] == "done", view["error"]
            steps = view["chains"][0]["rounds"][0]["steps"]
            assert [s["status"] for s in steps] == ["done", "done"]
            assert steps[0]["attempts"] == 2, "the killed step should have been re-run once"
            with service.sessions() as s:
                rows = s.scalars(select(Step).where(Step.job_id == job_id)).all()
            assert Counter((r.round_id, r.step_index) for r in rows) == {
                (rows[0].round_id, 0): 1,
                (rows[0].round_id, 1): 1,
            }
            assert rows[0].lease_holder.split("@")[0] != victim
            solve_calls = [c for c in server.calls_for("scripted-worker") if c.last_user == "solve"]
            assert len(solve_calls) == 2, "one call died with its worker, the reaper's re-run made the second"
    finally:
        server.stop()
