"""A step that hits a cluster limit is handed back and re-queued, never failed or dropped."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from conductor.app.service import Service
from conductor.domain.problem import Problem
from conductor.system import running_system
from schedulers.limits import RedisLimiter
from tests.conftest import default_script
from tests.schedulers._hammer import limited_pool
from tests.support.scripted_llm import ScriptedLLMServer
from tests.support.system import make_settings

pytestmark = pytest.mark.services


def _step(view: dict) -> dict | None:
    rounds = view["chains"][0]["rounds"] if view["chains"] else []
    return rounds[0]["steps"][0] if rounds and rounds[0]["steps"] else None


class CountingLimiter(RedisLimiter):
    """Counts admission attempts, so the test can see the re-queued retries."""

    asked = 0

    def slot(self, spec, *, estimated_tokens):  # type: ignore[no-untyped-def]
        if getattr(spec, "name", None) == "alpha":
            type(self).asked += 1
        return super().slot(spec, estimated_tokens=estimated_tokens)


def _wait_for_retries(service: Service, job_id: str, *, attempts: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if CountingLimiter.asked >= attempts:
            return service.job(job_id)
        time.sleep(0.05)
    raise AssertionError(f"the step was not retried {attempts} times: {service.job(job_id)}")


@contextlib.contextmanager
def slot_held_elsewhere(redis_url: str, pool, spec) -> Iterator[Callable[[], float]]:
    """Another process holds the only slot for `spec`; yields a function that frees it (and says when)."""
    other_process = RedisLimiter(redis_url, pool)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with other_process.slot(spec, estimated_tokens=1):
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)

    def free() -> float:
        freed_at = time.monotonic()
        release.set()
        holder.join()
        return freed_at

    try:
        yield free
    finally:
        release.set()
        holder.join()


@contextlib.contextmanager
def limited_system(tmp_path, pool, limiter) -> Iterator[Service]:
    settings = make_settings(tmp_path, recursion=False)
    with running_system(settings, pool=pool, limiter=limiter, worker=True, concurrency=2) as system:
        yield system.service


def test_a_rate_limited_step_is_requeued_with_a_countdown_and_completes_when_the_slot_frees(tmp_path, redis_db):
    server = ScriptedLLMServer(default_script()).start()
    pool = limited_pool(server.base_url, providers={}, alpha_limits={"concurrency": 1})
    # Waits at most 50 ms inside the task, then asks to come back in 0.3-0.6 s.
    CountingLimiter.asked = 0
    limiter = CountingLimiter(redis_db, pool, max_wait_s=0.05, busy_retry_after_s=0.3)
    try:
        with (
            slot_held_elsewhere(redis_db, pool, pool.workers[0]) as free,
            limited_system(tmp_path, pool, limiter) as service,
        ):
            job_id, _ = service.submit(Problem(question="[wf:single] x"))
            mid = _wait_for_retries(service, job_id, attempts=3)
            freed_at = free()
            service.wait([job_id], timeout=30)
            job = service.job(job_id)
    finally:
        server.stop()

    # While the slot was held: handed back (ready) between retries, claimed again on each one.
    assert mid["status"] == "running" and _step(mid)["status"] in ("ready", "running")
    step = _step(job)
    assert CountingLimiter.asked >= 4 and step["error"] is None
    # Waiting for a limit is not a lost attempt and spends none of the job's call budget.
    assert step["attempts"] == 1
    assert job["model_calls"] == 2, "one Conductor call and one worker call"
    assert job["status"] == "done" and step["status"] == "done"
    assert job["answer"].startswith("alpha did <answer it>")
    calls = server.calls_for("scripted-worker-alpha")
    assert len(calls) == 1 and calls[0].started >= freed_at, "only the admitted attempt reached the model"


def test_a_rate_limited_conductor_call_hands_its_round_back_and_plans_once_the_slot_frees(tmp_path, redis_db):
    server = ScriptedLLMServer(default_script()).start()
    pool = limited_pool(server.base_url, providers={"openai": {"concurrency": 1}})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=0.05, busy_retry_after_s=0.3)
    try:
        with (
            slot_held_elsewhere(redis_db, pool, pool.conductor) as free,
            limited_system(tmp_path, pool, limiter) as service,
        ):
            job_id, _ = service.submit(Problem(question="[wf:single] x"))
            time.sleep(1.5)  # several admissions refused meanwhile
            mid = service.job(job_id)
            freed_at = free()
            service.wait([job_id], timeout=30)
            job = service.job(job_id)
    finally:
        server.stop()

    assert mid["status"] == "running" and mid["chains"][0]["rounds"][0]["status"] == "planning"
    assert job["status"] == "done", job["error"]
    rnd = job["chains"][0]["rounds"][0]
    assert rnd["status"] == "done" and rnd["parse_status"] == "ok"
    assert job["model_calls"] == 2, "refused admissions spend none of the job's budget"
    plans = server.calls_for("scripted-conductor")
    assert len(plans) == 1 and plans[0].started >= freed_at
