"""A worker process's call slots: at most N model calls at once, held only for the call; a freed slot
goes to a waiting thread, Conductor calls before worker calls, then in order of arrival."""

from __future__ import annotations

import threading
import time

from conductor.inference.call_slots import CallSlots


def test_no_more_calls_than_slots_run_at_once():
    slots, lock = CallSlots(3), threading.Lock()
    running, peak = [0], [0]

    def call() -> None:
        with slots.slot():
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.02)
            with lock:
                running[0] -= 1

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 3


def test_a_freed_slot_goes_to_a_waiting_conductor_call_before_earlier_worker_calls():
    slots, order = CallSlots(1), []
    holder = slots.slot()
    holder.__enter__()  # the one slot is taken

    def wait(name: str, conductor: bool) -> threading.Thread:
        def run() -> None:
            with slots.slot(conductor=conductor):
                order.append(name)

        t = threading.Thread(target=run)
        t.start()
        time.sleep(0.05)  # queued in this order
        return t

    waiting = [wait("step 1", False), wait("step 2", False), wait("plan", True)]
    holder.__exit__(None, None, None)
    for t in waiting:
        t.join()
    assert order == ["plan", "step 1", "step 2"]


def test_a_freed_slot_goes_to_the_thread_that_waited_not_to_one_that_asks_right_after():
    slots, order = CallSlots(1), []
    holder = slots.slot()
    holder.__enter__()

    def waited() -> None:
        with slots.slot():
            order.append("waited")

    first = threading.Thread(target=waited)
    first.start()
    time.sleep(0.05)
    holder.__exit__(None, None, None)
    # This thread asks at once, before the woken one runs: a semaphore would let it barge in first.
    with slots.slot():
        order.append("asked right after")
    first.join()
    assert order == ["waited", "asked right after"]
