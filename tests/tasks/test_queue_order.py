"""A worker takes waiting Conductor calls before other work, so a batch's last jobs start early enough
not to leave model slots idle at its end (issue 30); the other queues still take turns."""

from __future__ import annotations

import pytest
from kombu import Connection

from conductor.config.settings import Settings
from conductor.runtime import Runtime
from tasks.app import create_app
from tasks.names import QUEUES, Queue
from tasks.queue_order import ConductorFirst
from tests.support.pools import scripted_pool


def test_the_conductor_queue_comes_first_and_the_rest_take_turns():
    order = ConductorFirst(["llm", "default", "conductor", "reward"])
    assert order.consume(4) == ["conductor", "llm", "default", "reward"]
    order.rotate("llm")  # kombu rotates the queue it last took from to the back
    assert order.consume(4) == ["conductor", "default", "reward", "llm"]
    order.rotate("conductor")
    assert order.consume(4)[0] == "conductor"


@pytest.mark.services
@pytest.mark.parametrize("first", [True, False])
def test_a_worker_on_redis_takes_waiting_plans_before_steps_queued_earlier(tmp_path, redis_db, first):
    settings = Settings(home=tmp_path, broker_url=redis_db, conductor_queue_first=first)
    app = create_app(settings, Runtime(settings, pool=scripted_pool("http://127.0.0.1:9/v1")))
    queues = {q.name: q for q in app.conf.task_queues}

    def publish(producer, queue: Queue, body: dict) -> None:
        producer.publish(body, exchange=queues[queue].exchange, routing_key=queue.value, declare=[queues[queue]])

    with Connection(redis_db, transport_options=app.conf.broker_transport_options) as conn:
        producer = conn.Producer()
        for i in range(5):
            publish(producer, Queue.LLM, {"step": i})
        for i in range(2):
            publish(producer, Queue.CONDUCTOR, {"plan": i})
        taken: list[dict] = []
        consumer = conn.Consumer(
            [queues[q] for q in QUEUES], callbacks=[lambda body, m: (taken.append(body), m.ack())], prefetch_count=1
        )
        with consumer:
            while len(taken) < 3:
                conn.drain_events(timeout=5)
    if first:
        assert taken == [{"plan": 0}, {"plan": 1}, {"step": 0}]
    else:  # kombu's round robin: the second plan waits its turn behind a step
        assert taken == [{"plan": 0}, {"step": 0}, {"plan": 1}]
