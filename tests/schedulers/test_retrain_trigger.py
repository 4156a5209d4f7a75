"""Beat's retrain check: single-flight across the cluster, and never beside a running cycle."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, update

from conductor.config.settings import Settings
from conductor.runtime import Runtime
from conductor.store.models import Job, Reward, TrainingCycle
from schedulers.retrain import maybe_start_retrain

pytestmark = pytest.mark.services


@pytest.fixture
def runtime(tmp_path, pg_url, redis_db):
    settings = Settings(
        home=tmp_path, database_url=pg_url, redis_url=redis_db, retrain_enabled=True, retrain_min_new_traces=3
    )
    rt = Runtime(settings)
    with rt.sessions.begin() as s:
        s.add(Job(id="j", problem={"question": "q"}))
        s.flush()
        s.add_all([Reward(job_id="j", chain_id=None, value=1.0, verifier="v") for _ in range(3)])
    yield rt
    rt.close()


def test_two_beats_racing_start_one_cycle(runtime):
    sent: list[int] = []
    _give_rewards(runtime, 5)
    barrier = threading.Barrier(2)
    results: list[str] = []

    def beat() -> None:
        barrier.wait()
        results.append(maybe_start_retrain(runtime.sessions, runtime.settings, sent.append))

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(sent) == 1, results
    with runtime.sessions() as s:
        assert s.scalar(select(TrainingCycle.status)) == "queued"


def test_no_cycle_starts_while_one_runs_nor_before_enough_new_traces(runtime):
    sent: list[int] = []
    assert "waiting" in maybe_start_retrain(runtime.sessions, runtime.settings, sent.append)
    _give_rewards(runtime, 5)
    assert "started" in maybe_start_retrain(runtime.sessions, runtime.settings, sent.append)
    with runtime.sessions.begin() as s:
        s.execute(update(TrainingCycle).values(status="running"))
    _give_rewards(runtime, 5)

    assert "already" in maybe_start_retrain(runtime.sessions, runtime.settings, sent.append)
    assert len(sent) == 1

    with runtime.sessions.begin() as s:
        s.execute(update(TrainingCycle).values(status="done"))
    # Traces that arrived while the cycle ran are new for the next one.
    assert "started" in maybe_start_retrain(runtime.sessions, runtime.settings, sent.append)
    assert len(sent) == 2


def test_the_check_does_nothing_when_retraining_is_off(runtime):
    settings = runtime.settings.model_copy(update={"retrain_enabled": False})
    assert maybe_start_retrain(runtime.sessions, settings, lambda _: None) == "disabled"


def _give_rewards(rt: Runtime, n: int) -> None:
    """`n` new chain rewards (what the check counts), on a chain of their own."""
    from conductor.store.models import Chain

    with rt.sessions.begin() as s:
        chain = Chain(job_id="j", question="q")
        s.add(chain)
        s.flush()
        s.add_all([Reward(job_id="j", chain_id=chain.id, value=1.0, verifier="v") for _ in range(n)])
