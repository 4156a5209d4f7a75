"""The event-driven DAG: steps run as soon as their inputs exist, independent steps overlap."""

from __future__ import annotations

from conductor.domain.problem import Problem
from tests.conftest import default_script
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.system import embedded_system


def _run(tmp_path, question: str, *, delay: float = 0.0, **settings):
    server = ScriptedLLMServer(default_script(worker_delay=delay)).start()
    try:
        with embedded_system(tmp_path, scripted_pool(server.base_url), recursion=False, **settings) as sys:
            job_id, _ = sys.service.submit(Problem(question=question))
            sys.service.wait([job_id], timeout=60)
            return sys.service.job(job_id), server.calls_for("scripted-worker")
    finally:
        server.stop()


def test_independent_steps_overlap_and_the_join_waits_for_both(tmp_path):
    job, calls = _run(tmp_path, "[wf:fanout] compute", delay=0.8)

    assert job["status"] == "done"
    by_task = {c.last_user: c for c in calls}
    a, b, combine = by_task["part A"], by_task["part B"], by_task["combine"]
    assert a.started < b.ended and b.started < a.ended, "independent steps should run at the same time"
    assert combine.started >= max(a.ended, b.ended), "the join step must start after both inputs exist"
    assert len([m for m in combine.messages if m["role"] == "assistant"]) == 2
    assert job["answer"].startswith("alpha did <combine>")


def test_a_dependent_step_sees_its_input_and_starts_after_it(tmp_path):
    job, calls = _run(tmp_path, "[wf:chain] compute", delay=0.3)

    solve, check = calls[0], calls[1]
    assert solve.last_user == "solve" and check.last_user == "check"
    assert check.started >= solve.ended
    assert check.messages[-2] == {"role": "assistant", "content": "alpha did <solve> seeing 0"}
    steps = job["chains"][0]["rounds"][0]["steps"]
    assert [s["status"] for s in steps] == ["done", "done"]
    assert job["workflow"] == {"model_id": [0, 1], "subtasks": ["solve", "check"], "access_list": [[], "all"]}


def test_the_embedded_worker_reaps_a_step_whose_worker_died_with_it(tmp_path):
    """No beat process in embedded mode: the in-process worker runs the reaper itself."""
    from conductor.app.service import JobSpec
    from conductor.runtime import Runtime
    from conductor.system import service_for
    from tasks.app import create_app
    from tasks.dispatch import Dispatcher
    from tasks.embedded import EmbeddedWorker
    from tests.support.system import make_settings

    class NoQueue:
        def submit(self, job_ids: list[str]) -> None:
            pass

    server = ScriptedLLMServer(default_script()).start()
    settings = make_settings(tmp_path, recursion=False, step_lease_s=2, task_time_limit_s=1, reaper_interval_s=0.3)
    runtime = Runtime(settings, pool=scripted_pool(server.base_url))
    runtime.migrate()
    workflow = {"model_id": [0], "subtasks": ["only step"], "access_list": [[]]}
    job_id, _ = service_for(runtime, NoQueue().submit).submit(
        Problem(question="q"), JobSpec(options={"workflow": workflow})
    )
    (step_id,) = runtime.engine.start_job(job_id).steps
    assert runtime.engine.claim_step(step_id, "ghost@dead") is not None  # claimed, then its worker died
    app = create_app(settings, runtime)
    try:
        with EmbeddedWorker(app, concurrency=2, reap_every_s=settings.reaper_interval_s):
            service = service_for(runtime, Dispatcher(app).submit)
            service.wait([job_id], timeout=20)
            job = service.job(job_id)
    finally:
        runtime.close()
        server.stop()
    step = job["chains"][0]["rounds"][0]["steps"][0]
    assert job["status"] == "done" and step["attempts"] == 2
    assert job["answer"].startswith("alpha did <only step>")
