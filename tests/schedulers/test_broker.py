"""The reaper's view of the broker: which work waits in kombu's Redis queues, read from the messages
a real Celery producer wrote (priorities included), and nothing when there are too many to read."""

from __future__ import annotations

import pytest
from celery import Celery

from schedulers.broker import redis_queue_depth, redis_waiting_task_ids
from tasks.dispatch import Dispatcher, effects_of
from tasks.names import QUEUES, ROUTES

pytestmark = pytest.mark.services


def test_the_waiting_messages_name_the_work_they_carry(redis_db):
    from conductor.domain.effects import Effects

    app = Celery("probe", broker=redis_db, set_as_current=False)
    app.conf.task_routes = ROUTES
    send = Dispatcher(app)
    send(Effects(solve=["j1"], plans=[7], replans=[8], steps=[11, 12], finalize=["j2"], score=["j3"]))
    app.send_task("conductor.run_step", args=[13], task_id="step-13", priority=9)  # a priority sub-queue

    ids = redis_waiting_task_ids(redis_db, QUEUES, limit=100)()
    assert ids is not None
    waiting = effects_of(ids)
    assert (waiting.solve, waiting.plans, waiting.replans, waiting.finalize, waiting.score) == (
        ["j1"],
        [7],
        [8],
        ["j2"],
        ["j3"],
    )
    assert sorted(waiting.steps) == [11, 12, 13]
    assert redis_queue_depth(redis_db, QUEUES)() == 8
    assert redis_waiting_task_ids(redis_db, QUEUES, limit=7)() is None, "too many to read: time decides"


def test_task_ids_of_other_tasks_or_malformed_ones_are_ignored():
    eff = effects_of(["step-3", "step-x", "retrain-5", "c0ffee", "plan-", "solve-abc"])
    assert (eff.steps, eff.solve, eff.plans) == ([3], ["abc"], [])
