"""The composition root: one builder of a running system for the CLI, the API, tests and benchmarks."""

from __future__ import annotations

from conductor.domain.problem import Problem
from conductor.system import running_system
from tests.support.pools import scripted_pool
from tests.support.system import make_settings


def test_a_system_without_a_worker_is_migrated_and_its_jobs_wait_in_the_broker(tmp_path):
    settings = make_settings(tmp_path)  # memory://: the embedded default would start a worker
    with running_system(settings, pool=scripted_pool("http://127.0.0.1:9"), worker=False) as system:
        assert system.service.usage()["jobs"] == 0, "the store was migrated before anything ran"
        job_id, created = system.service.submit(Problem(question="q"))
        job = system.service.job(job_id)
        # Submit starts the job itself (no solve hop): its plan round exists, but no worker has taken it.
        assert created and job["status"] == "running"
        assert [r["status"] for c in job["chains"] for r in c["rounds"]] == ["planning"]
        assert [r["workflow"] for c in job["chains"] for r in c["rounds"]] == [None], "no worker took it"
        assert system.runtime.pool is system.runtime.orchestrator.pool, "one set of parts per process"
