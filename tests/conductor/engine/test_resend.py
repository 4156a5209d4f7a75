"""The reaper re-sends only what is plausibly lost: past its interval since the last send (which
doubles with each re-send of the same thing) and not waiting in a broker queue. Both stores."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from conductor.config.settings import Settings
from conductor.domain.effects import Effects
from conductor.domain.problem import Problem
from conductor.domain.resend import ResendPolicy
from conductor.domain.states import JobStatus
from conductor.engine import Engine
from conductor.runtime import Runtime
from conductor.store.models import Job, Round, Step
from conductor.system import service_for
from tests.conductor.engine.test_engine_store import NoQueue, _planned_fanout
from tests.support.pools import scripted_pool

GRACE = 60.0


@pytest.fixture(params=["sqlite", "postgresql"])
def runtime(request, tmp_path) -> Runtime:
    url = None if request.param == "sqlite" else request.getfixturevalue("pg_url")
    settings = Settings(home=tmp_path, database_url=url, recursion=False, ready_grace_s=GRACE)
    runtime = Runtime(settings, pool=scripted_pool("http://127.0.0.1:9/v1"))
    runtime.migrate()
    yield runtime
    runtime.close()


def ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


def backdate(runtime: Runtime, model, row_id, **columns) -> None:
    with runtime.sessions.begin() as s:
        s.execute(update(model).where(model.id == row_id).values(**columns))


def sends_of(runtime: Runtime, model, row_id) -> int:
    with runtime.sessions() as s:
        return s.get_one(model, row_id).sends


def test_the_interval_doubles_with_each_resend_up_to_its_cap():
    policy = ResendPolicy(grace_s=10, max_interval_s=45)
    assert [policy.interval(n).total_seconds() for n in range(5)] == [10, 20, 40, 45, 45]
    t = datetime.now(UTC)
    assert policy.due(t - timedelta(seconds=21), 1, t) and not policy.due(t - timedelta(seconds=19), 1, t)
    # A lease that ran out is lost at once; once re-sent after it ended, the re-send backs off.
    assert policy.lease_due(t - timedelta(seconds=1), None, 0, t)
    assert not policy.lease_due(t + timedelta(seconds=1), None, 0, t)
    assert not policy.lease_due(t - timedelta(seconds=30), t - timedelta(seconds=5), 1, t)
    assert policy.lease_due(t - timedelta(seconds=30), t - timedelta(seconds=25), 1, t)


def test_a_ready_step_is_resent_once_then_only_after_a_doubled_interval(runtime):
    engine: Engine = runtime.engine
    _, (a, b) = _planned_fanout(engine, runtime)
    backdate(runtime, Step, a, ready_at=ago(10 * GRACE))
    assert engine.recover().steps == [a], "past the grace and in no queue: plausibly lost"
    assert engine.recover().steps == [], "just re-sent: never twice in a row"
    assert sends_of(runtime, Step, a) == 1
    backdate(runtime, Step, a, sent_at=ago(1.5 * GRACE))
    assert engine.recover().steps == [], "the second interval is twice the grace"
    backdate(runtime, Step, a, sent_at=ago(2 * GRACE + 1))
    assert engine.recover().steps == [a]
    assert sends_of(runtime, Step, a) == 2
    assert sends_of(runtime, Step, b) == 0, "a fresh step is nobody's loss"


def test_work_waiting_in_a_queue_is_never_resent_however_long_it_waits(runtime):
    engine: Engine = runtime.engine
    _, (a, b) = _planned_fanout(engine, runtime)
    for step in (a, b):
        backdate(runtime, Step, step, ready_at=ago(100 * GRACE))
    assert engine.recover(waiting=Effects(steps=[a])).steps == [b]
    assert sends_of(runtime, Step, a) == 0, "a message in the queue is waiting, not lost"


def test_a_step_whose_lease_ran_out_is_resent_at_once_and_then_backs_off(runtime):
    engine: Engine = runtime.engine
    _, (a, _b) = _planned_fanout(engine, runtime)
    assert engine.claim_step(a, "w1") is not None
    backdate(runtime, Step, a, lease_until=ago(1))
    assert engine.recover().steps == [a]
    assert engine.recover().steps == [], "the re-send waits for its interval like any other"
    backdate(runtime, Step, a, sent_at=ago(2 * GRACE + 1))
    assert engine.recover().steps == [a]


def test_a_step_lost_three_times_fails_with_that_reason(runtime):
    engine: Engine = runtime.engine
    _, (a, _b) = _planned_fanout(engine, runtime)
    backdate(runtime, Step, a, status="running", attempts=3, lease_until=ago(1))
    assert engine.recover().steps == []
    with runtime.sessions() as s:
        step = s.get_one(Step, a)
        assert step.status == "failed" and "lost the step 3 times" in (step.error or "")


def test_plans_solve_and_finalize_follow_the_same_rules(runtime):
    engine: Engine = runtime.engine
    service = service_for(runtime, NoQueue().submit)
    queued, planning, closing = (service.submit(Problem(question=f"q{i}"))[0] for i in range(3))
    (round_id,) = engine.start_job(planning).plans
    engine.start_job(closing)
    with runtime.sessions.begin() as s:
        s.execute(update(Job).where(Job.id == queued).values(status=JobStatus.QUEUED, started_at=ago(10 * GRACE)))
        s.execute(update(Round).where(Round.id == round_id).values(created_at=ago(10 * GRACE)))
        s.execute(update(Job).where(Job.id == closing).values(open_chains=0))

    first = engine.recover()
    assert (first.solve, first.plans, first.finalize) == ([queued], [round_id], [closing])
    again = engine.recover()
    assert not (again.solve or again.plans or again.finalize), "each was just re-sent"

    backdate(runtime, Job, queued, sent_at=ago(2 * GRACE + 1))
    backdate(runtime, Round, round_id, sent_at=ago(2 * GRACE + 1))
    backdate(runtime, Job, closing, sent_at=ago(2 * GRACE + 1))
    waiting = Effects(solve=[queued])
    later = engine.recover(waiting=waiting)
    assert (later.solve, later.plans, later.finalize) == ([], [round_id], [closing])
    assert [sends_of(runtime, Job, queued), sends_of(runtime, Round, round_id)] == [1, 2]


def test_a_round_handed_back_by_a_rate_limit_counts_its_retry_as_a_send(runtime):
    engine: Engine = runtime.engine
    job_id, _ = service_for(runtime, NoQueue().submit).submit(Problem(question="q"))
    (round_id,) = engine.start_job(job_id).plans
    backdate(runtime, Round, round_id, created_at=ago(10 * GRACE))
    assert engine.claim_round(round_id) is not None
    engine.release_round(round_id)  # the task re-queues itself with a countdown
    assert engine.recover().plans == [], "its retry message is on its way"
