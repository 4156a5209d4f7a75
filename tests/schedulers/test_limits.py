"""RedisLimiter on a real Redis: caps, windows, token costs, leases, and how Runtime wires it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conductor.domain.errors import ModelCallError, RateLimited
from conductor.inference.gateway import NoLimits
from conductor.runtime import Runtime
from schedulers import keys
from schedulers.limits import RedisLimiter, cluster_limiter, has_limits, model_scope
from tests.schedulers._hammer import limited_pool
from tests.support.pools import scripted_pool
from tests.support.system import make_settings

pytestmark = pytest.mark.services
BASE = "http://127.0.0.1:9/v1"  # never called: these tests only take slots
REPO = Path(__file__).resolve().parents[2]


def _take(limiter: RedisLimiter, spec, tokens: int = 1) -> None:
    """One admitted (empty) call."""
    with limiter.slot(spec, estimated_tokens=tokens):
        pass


def _hold(limiter: RedisLimiter, spec, seconds: float, entered: threading.Event) -> threading.Thread:
    def run() -> None:
        with limiter.slot(spec, estimated_tokens=1):
            entered.set()
            time.sleep(seconds)

    t = threading.Thread(target=run)
    t.start()
    assert entered.wait(5)
    return t


def test_concurrency_cap_holds_across_threads_and_frees_on_exit(redis_db):
    pool = limited_pool(BASE, providers={"openai": {"concurrency": 3}})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=10)
    alpha, beta = pool.workers
    lock, in_flight, peak = threading.Lock(), [0], [0]

    def call(spec) -> None:
        with limiter.slot(spec, estimated_tokens=10):
            with lock:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            time.sleep(0.05)
            with lock:
                in_flight[0] -= 1

    threads = [threading.Thread(target=call, args=(alpha if i % 2 else beta,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert peak[0] == 3, "two models of one provider share the provider's cap"
    assert limiter.in_flight(keys.provider_scope("openai")) == 0


def test_slot_is_released_when_the_call_raises(redis_db):
    pool = limited_pool(BASE, providers={"openai": {"concurrency": 1}})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=0)

    with pytest.raises(ZeroDivisionError), limiter.slot(pool.workers[0], estimated_tokens=1):
        raise ZeroDivisionError

    with limiter.slot(pool.workers[0], estimated_tokens=1):  # would raise RateLimited if it leaked
        assert limiter.in_flight(keys.provider_scope("openai")) == 1


def test_a_busy_cap_waits_then_admits_within_max_wait(redis_db):
    pool = limited_pool(BASE, providers={}, alpha_limits={"concurrency": 1})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=5)
    holder = _hold(limiter, pool.workers[0], 0.5, threading.Event())

    started = time.monotonic()
    with limiter.slot(pool.workers[0], estimated_tokens=1):
        waited = time.monotonic() - started
    holder.join()

    assert 0.3 <= waited < 2


def test_a_busy_cap_past_max_wait_raises_rate_limited(redis_db):
    pool = limited_pool(BASE, providers={}, alpha_limits={"concurrency": 1})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=0.2, busy_retry_after_s=1.0)
    release = threading.Event()
    entered = threading.Event()

    def hold() -> None:
        with limiter.slot(pool.workers[0], estimated_tokens=1):
            entered.set()
            release.wait(5)

    t = threading.Thread(target=hold)
    t.start()
    assert entered.wait(5)
    try:
        started = time.monotonic()
        with pytest.raises(RateLimited) as info:
            _take(limiter, pool.workers[0])
        assert time.monotonic() - started < 1.5
    finally:
        release.set()
        t.join()

    assert isinstance(info.value, ModelCallError) and info.value.retryable
    assert 1.0 <= info.value.retry_after <= 2.0
    assert "concurrency 1" in str(info.value)
    # beta has no cap of its own and the provider has none: unaffected
    _take(limiter, pool.workers[1])


def test_rpm_admits_the_limit_then_says_how_long_to_come_back(redis_db):
    pool = limited_pool(BASE, providers={"openai": {"rpm": 3}})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=0.2)
    for _ in range(3):
        _take(limiter, pool.workers[0])

    with pytest.raises(RateLimited) as info:
        _take(limiter, pool.workers[1])

    assert 55 <= info.value.retry_after <= 60
    assert "provider:openai requests 3 per 1 minute" in str(info.value)


def test_rps_waits_for_the_window_to_move(redis_db):
    pool = limited_pool(BASE, providers={"openai": {"rps": 2}})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=3)
    admitted = []
    for _ in range(5):
        with limiter.slot(pool.workers[0], estimated_tokens=1):
            admitted.append(time.monotonic())

    assert admitted[2] - admitted[0] >= 0.95 and admitted[4] - admitted[2] >= 0.95
    assert admitted[1] - admitted[0] < 0.5


def test_tokens_are_weighted_by_the_estimate(redis_db):
    pool = limited_pool(BASE, providers={}, alpha_limits={"tpm": 1000})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=0.2)
    alpha = pool.workers[0]
    _take(limiter, alpha, 600)
    _take(limiter, alpha, 300)

    with pytest.raises(RateLimited) as info:
        _take(limiter, alpha, 200)  # 900 + 200 > 1000
    assert "tokens 1000 per 1 minute" in str(info.value) and info.value.retry_after > 1
    _take(limiter, alpha, 50)  # still fits


def test_a_call_bigger_than_the_whole_token_budget_is_still_admitted_on_an_empty_window(redis_db):
    pool = limited_pool(BASE, providers={}, alpha_limits={"tpm": 1000})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=0.2)

    _take(limiter, pool.workers[0], 5000)

    with pytest.raises(RateLimited):
        _take(limiter, pool.workers[0])


def test_limits_are_kept_per_model_and_per_server(redis_db):
    pool = limited_pool(BASE, providers={}, alpha_limits={"rpm": 1})
    other_server = pool.workers[0].model_copy(update={"api_base": "http://other:8000/v1"})
    limiter = RedisLimiter(redis_db, pool, max_wait_s=0)
    _take(limiter, pool.workers[0])

    _take(limiter, other_server)  # same model name, another server: own quota
    _take(limiter, pool.workers[1])  # beta: no limits at all
    with pytest.raises(RateLimited):
        _take(limiter, pool.workers[0])
    assert model_scope(other_server) != model_scope(pool.workers[0])


_HOLD_AND_HANG = """
import sys, time
from schedulers.limits import RedisLimiter
from tests.schedulers._hammer import limited_pool
pool = limited_pool("http://127.0.0.1:9/v1", providers={"openai": {"concurrency": 1}}, timeout_s=1.0)
limiter = RedisLimiter(sys.argv[1], pool, max_wait_s=0, lease_margin_s=0)
with limiter.slot(pool.workers[0], estimated_tokens=1):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_killed_process_cannot_keep_its_slot_past_the_lease(redis_db):
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLD_AND_HANG, redis_db], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        proc.kill()  # SIGKILL: no finally, no release
        proc.wait(5)
        pool = limited_pool(BASE, providers={"openai": {"concurrency": 1}})
        assert RedisLimiter(redis_db, pool).in_flight(keys.provider_scope("openai")) == 1

        with pytest.raises(RateLimited):
            _take(RedisLimiter(redis_db, pool, max_wait_s=0), pool.workers[0])
        started = time.monotonic()
        with RedisLimiter(redis_db, pool, max_wait_s=5).slot(pool.workers[0], estimated_tokens=1):
            waited = time.monotonic() - started
    finally:
        proc.kill()
    assert waited < 1.5, "the dead holder's 1 s lease should have been swept"


def test_runtime_builds_a_redis_limiter_only_when_there_are_limits_and_a_redis(tmp_path, redis_db):
    limited = limited_pool(BASE)
    unlimited = scripted_pool(BASE)

    # The entry points (tasks.app, the CLI) pass the limiter factory in; conductor.app does not import schedulers.
    with_url = Runtime(make_settings(tmp_path, redis_url=redis_db), pool=limited, limiter_factory=cluster_limiter)
    from_broker = Runtime(make_settings(tmp_path, broker_url=redis_db), pool=limited, limiter_factory=cluster_limiter)
    embedded = Runtime(make_settings(tmp_path), pool=limited, limiter_factory=cluster_limiter)
    no_limits = Runtime(make_settings(tmp_path, redis_url=redis_db), pool=unlimited, limiter_factory=cluster_limiter)
    given = NoLimits()

    assert isinstance(with_url.gateway.limiter, RedisLimiter)
    assert isinstance(from_broker.gateway.limiter, RedisLimiter)
    assert isinstance(embedded.gateway.limiter, NoLimits)
    assert isinstance(no_limits.gateway.limiter, NoLimits)
    assert Runtime(make_settings(tmp_path, redis_url=redis_db), pool=limited, limiter=given).gateway.limiter is given
    assert has_limits(limited) and not has_limits(unlimited)
