"""The engine's transitions on both stores: a join step is released exactly once, whatever the race."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from conductor.app.service import JobSpec
from conductor.config.settings import Settings
from conductor.domain.effects import Effects
from conductor.domain.problem import Problem
from conductor.engine import Engine, PlanRecord
from conductor.inference.completion import Completion
from conductor.runtime import Runtime
from conductor.store.models import Job, Step
from conductor.system import service_for
from tests.support.pools import scripted_pool

FANOUT = "```python\nmodel_id = [0, 1, 0]\nsubtasks = ['a', 'b', 'join']\naccess_list = [[], [], [0, 1]]\n```"


class NoQueue:
    """Submit without a broker: these tests drive the engine by hand."""

    def submit(self, job_ids: list[str]) -> None:
        pass


@pytest.fixture(params=["sqlite", "postgresql"])
def runtime(request, tmp_path) -> Runtime:
    url = None if request.param == "sqlite" else request.getfixturevalue("pg_url")
    settings = Settings(home=tmp_path, database_url=url, recursion=False)
    runtime = Runtime(settings, pool=scripted_pool("http://127.0.0.1:9/v1"))
    runtime.migrate()
    yield runtime
    runtime.close()


@pytest.fixture
def engine(runtime: Runtime) -> Engine:
    return runtime.engine


def _planned_fanout(engine: Engine, runtime: Runtime) -> tuple[str, list[int]]:
    job_id, _ = service_for(runtime, NoQueue().submit).submit(Problem(question="q"))
    (round_id,) = engine.start_job(job_id).plans
    assert engine.claim_round(round_id) is not None
    completion = Completion(text=FANOUT, model="m", worker="conductor", token_ids=[1], logprobs=[-0.1])
    roots = engine.record_plan(round_id, PlanRecord(messages=[], completion=completion)).steps
    return job_id, roots


def test_parents_finishing_at_the_same_moment_release_the_join_exactly_once(engine, runtime):
    for _ in range(5):
        _, roots = _planned_fanout(engine, runtime)
        assert len(roots) == 2
        for sid in roots:
            assert engine.claim_step(sid) is not None
        barrier = threading.Barrier(2)
        released: list[list[int]] = []

        def finish(sid: int, barrier: threading.Barrier, released: list[list[int]]) -> None:
            barrier.wait()
            released.append(engine.complete_step(sid, f"out {sid}").steps)

        threads = [threading.Thread(target=finish, args=(sid, barrier, released)) for sid in roots]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(len(r) for r in released) == [0, 1], f"the join must be released once: {released}"


def test_a_step_completed_twice_records_its_first_output_and_releases_nothing_more(engine, runtime):
    job_id, roots = _planned_fanout(engine, runtime)
    for sid in roots:
        engine.claim_step(sid)
    engine.complete_step(roots[0], "first")
    again = engine.complete_step(roots[0], "second")
    assert not again
    join = engine.complete_step(roots[1], "b").steps
    assert len(join) == 1
    task = engine.claim_step(join[0])
    assert task is not None and task.context == [("a", "first"), ("b", "b")]
    assert engine.claim_step(join[0]) is None, "a claimed step cannot be claimed twice under its lease"
    finalize = engine.complete_step(join[0], "joined").finalize
    assert finalize == [job_id]
    assert engine.finalize(job_id) and not engine.finalize(job_id)


def test_an_idempotency_key_returns_the_first_job_with_or_without_a_tenant(runtime):
    service = service_for(runtime, NoQueue().submit)
    first, created = service.submit(Problem(question="q"), JobSpec(idempotency_key="k-1"))
    again, created_again = service.submit(Problem(question="q, sent twice"), JobSpec(idempotency_key="k-1"))
    other, _ = service.submit(Problem(question="q"), JobSpec(idempotency_key="k-2"))
    assert created and not created_again and again == first and other != first
    unkeyed = {service.submit(Problem(question="q"))[0] for _ in range(2)}
    assert len(unkeyed) == 2, "jobs without a key are never merged"


def test_the_reaper_resends_solve_only_for_jobs_queued_past_the_grace_since_their_admission(engine, runtime):
    """The feeder stamps started_at when it admits a job written long ago: its solve is in flight."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from conductor.domain.states import JobStatus
    from conductor.store.models import Job

    service = service_for(runtime, NoQueue().submit)
    long_ago = datetime.now(UTC) - timedelta(seconds=10 * runtime.settings.ready_grace_s)
    just_admitted, lost, never_admitted = (service.submit(Problem(question=f"q{i}"))[0] for i in range(3))
    with runtime.sessions.begin() as s:
        s.execute(update(Job).values(created_at=long_ago, status=JobStatus.QUEUED))
        s.execute(update(Job).where(Job.id == just_admitted).values(started_at=datetime.now(UTC)))
        s.execute(update(Job).where(Job.id == lost).values(started_at=long_ago))
    assert sorted(engine.recover().solve) == sorted([lost, never_admitted])


def test_a_plan_round_is_held_to_the_pool_conductors_step_cap_whatever_the_job_asks(tmp_path):
    pool = scripted_pool("http://127.0.0.1:9/v1")
    pool = pool.model_copy(update={"conductor": pool.conductor.model_copy(update={"max_steps": 2})})
    runtime = Runtime(Settings(home=tmp_path, recursion=False), pool=pool)
    runtime.migrate()
    try:
        job_id, _ = service_for(runtime, NoQueue().submit).submit(
            Problem(question="q"), JobSpec(options={"max_steps": 5})
        )
        (round_id,) = runtime.engine.start_job(job_id).plans
        task = runtime.engine.claim_round(round_id)
        assert task is not None and task.max_steps == 2
    finally:
        runtime.close()


def test_a_lease_counts_one_model_call_on_the_job_and_a_spent_budget_fails_the_step_instead(tmp_path, request):
    for store in ("sqlite", "postgresql"):
        url = None if store == "sqlite" else request.getfixturevalue("pg_url")
        settings = Settings(home=tmp_path / store, database_url=url, recursion=False, max_model_calls=2)
        runtime = Runtime(settings, pool=scripted_pool("http://127.0.0.1:9/v1"))
        runtime.migrate()
        engine = runtime.engine
        try:
            job_id, roots = _planned_fanout(engine, runtime)  # claim_round: the plan counted no call
            task, ended = engine.lease_step(roots[0], "h1")
            assert task is not None and not ended and task.context == []
            assert engine.lease_step(roots[0], "h2") == (None, Effects()), f"{store}: leased once"
            with runtime.sessions() as s:
                job = s.get_one(Job, job_id)
                holder = s.scalar(select(Step.lease_holder).where(Step.id == roots[0]))
            assert (job.model_calls, holder) == (1, "h1"), store
            assert engine.lease_step(roots[1], "h1")[0] is not None  # call 2: the cap
            engine.complete_step(roots[0], "a")
            (join,) = engine.complete_step(roots[1], "b").steps
            task, ended = engine.lease_step(join, "h1")
            assert task is None and ended.finalize == [job_id], store
            with runtime.sessions() as s:
                step = s.get_one(Step, join)
            assert step.status == "failed" and "model calls" in (step.error or ""), store
        finally:
            runtime.close()


def test_a_step_handed_to_a_nested_workflow_is_delegated_unleased_and_ends_with_that_workflow(tmp_path, request):
    for store in ("sqlite", "postgresql"):
        url = None if store == "sqlite" else request.getfixturevalue("pg_url")
        settings = Settings(home=tmp_path / store, database_url=url, recursion=False, max_depth=1, ready_grace_s=0.01)
        pool = scripted_pool("http://127.0.0.1:9/v1", in_pool=True)
        runtime = Runtime(settings, pool=pool)
        runtime.migrate()
        engine = runtime.engine
        try:
            nest = {"model_id": [len(pool.workers)], "subtasks": ["think"], "access_list": [[]]}
            job_id, _ = service_for(runtime, NoQueue().submit).submit(
                Problem(question="q"), JobSpec(options={"workflow": nest})
            )
            (sid,) = engine.start_job(job_id).steps
            task, _ = engine.lease_step(sid, "h1")
            assert task is not None and engine.runs_nested(task), store
            (nested_round,) = engine.start_nested(task).plans
            assert not engine.start_nested(task), f"{store}: a second delivery starts no second workflow"
            with runtime.sessions() as s:
                step = s.get_one(Step, sid)
                assert (step.status, step.lease_holder, step.lease_until) == ("delegated", "h1", None), store
            assert sid not in engine.recover().steps, f"{store}: the reaper leaves a delegated step alone"
            assert engine.lease_step(sid, "h2") == (None, Effects()), store
            assert engine.fail_round(nested_round, "no plan").finalize == [job_id], store
            with runtime.sessions() as s:
                assert s.get_one(Step, sid).status == "failed", store
        finally:
            runtime.close()
