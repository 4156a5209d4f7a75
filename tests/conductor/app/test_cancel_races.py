"""A job cancelled while a worker is recording its result, on PostgreSQL: the cancel and the
engine's transition queue for the same row lock, in a chosen order, and the result that comes
second must not undo the cancel."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, text

from conductor.config.settings import Settings
from conductor.domain.problem import Problem
from conductor.engine import PlanRecord
from conductor.engine.cancel import cancel_jobs
from conductor.inference.completion import Completion
from conductor.runtime import Runtime
from conductor.store.models import Chain, Job, Round, Step
from conductor.system import service_for
from tests.support.pools import scripted_pool

pytestmark = pytest.mark.services

FANOUT = "```python\nmodel_id = [0, 1, 0]\nsubtasks = ['a', 'b', 'join']\naccess_list = [[], [], [0, 1]]\n```"


class NoQueue:
    def submit(self, job_ids: list[str]) -> None:
        pass


@pytest.fixture
def runtime(tmp_path: Path, pg_url: str) -> Iterator[Runtime]:
    rt = Runtime(Settings(home=tmp_path, database_url=pg_url, recursion=False), pool=scripted_pool("http://x/v1"))
    rt.migrate()
    yield rt
    rt.close()


def _waiting_on_locks(rt: Runtime) -> int:
    with rt.sessions() as s:
        q = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        return int(s.scalar(text(q)) or 0)


def _queue(rt: Runtime, run: Callable[[], Any], waiting: int) -> threading.Thread:
    """Start `run` in a thread and return once it waits for a row lock (the `waiting`-th waiter)."""
    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 10
    while _waiting_on_locks(rt) < waiting:
        assert thread.is_alive() and time.monotonic() < deadline, "it never waited for the lock"
        time.sleep(0.02)
    return thread


def test_a_plan_recorded_just_after_its_job_was_cancelled_starts_no_step(runtime: Runtime):
    engine = runtime.engine
    job_id, _ = service_for(runtime, NoQueue().submit).submit(Problem(question="q"))
    (round_id,) = engine.start_job(job_id).plans
    assert engine.claim_round(round_id) is not None
    plan = PlanRecord(messages=[], completion=Completion(text=FANOUT, model="m", worker="conductor", prompt_tokens=3))
    recorded: list[list[int]] = []

    with runtime.db.connect() as blocker:  # holds the round while the two line up behind it
        blocker.execute(select(Round.id).where(Round.id == round_id).with_for_update())
        cancel = _queue(runtime, lambda: cancel_jobs(runtime.sessions, [job_id]), waiting=1)
        record = _queue(runtime, lambda: recorded.append(engine.record_plan(round_id, plan).steps), waiting=2)
        blocker.rollback()
    cancel.join(10)
    record.join(10)

    assert recorded == [[]], "the late plan released steps: they would make model calls for a cancelled job"
    with runtime.sessions() as s:
        assert s.get_one(Job, job_id).status == "cancelled"
        assert s.get_one(Round, round_id).status == "failed"
        assert list(s.scalars(select(Step.id).where(Step.job_id == job_id))) == []


def test_a_job_started_while_the_cancel_waits_for_it_ends_with_all_its_rows(runtime: Runtime):
    engine = runtime.engine
    job_id, _ = service_for(runtime, NoQueue().submit).submit(Problem(question="q"))
    started: list[int] = []

    def start_first(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        # Just before the cancel locks the job row: the job starts, writing its chain and first
        # round after the cancel looked for them.
        if not started and statement.startswith("SELECT jobs.id") and "FOR NO KEY UPDATE" in statement:
            started.append(1)
            started.extend(engine.start_job(job_id).plans)

    event.listen(runtime.db, "before_cursor_execute", start_first)
    try:
        assert cancel_jobs(runtime.sessions, [job_id]) == 1
    finally:
        event.remove(runtime.db, "before_cursor_execute", start_first)

    (round_id,) = started[1:]
    assert engine.claim_round(round_id) is None, "the new round's Conductor call may still start"
    with runtime.sessions() as s:
        assert s.get_one(Job, job_id).status == "cancelled"
        assert s.get_one(Round, round_id).status == "failed"
        assert list(s.scalars(select(Chain.status).where(Chain.job_id == job_id))) == ["failed"]
