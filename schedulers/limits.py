"""Cluster-wide rate limits and concurrency caps for model calls, kept in Redis.

`RedisLimiter` is the gateway's `CallLimiter`: before each attempt of a model call it takes
one slot under every limit that applies, the provider's (`Pool.providers[provider]`) and the
model's own (`ModelSpec.limits`), and these hold across every thread, process and machine
that shares the Redis server (Celery's `rate_limit` is per worker, so it cannot do this).

Rates use the `limits` library (`limits.storage.RedisStorage`), which keeps its windows in
Redis and updates them with Lua scripts, so one hit is atomic across the cluster:
- requests (`rpm`, `rps`): the *moving window* strategy. It is exact (no window of that
  length ever holds more than the limit) and stores one list entry per request, which is
  cheap at request rates.
- tokens (`tpm`): the *sliding window counter* strategy with `cost=` the call's estimated
  tokens. A moving window would store one entry per token (millions per minute); the
  counter keeps two integers per window and weights the previous one, close enough for
  token quotas, which providers meter approximately themselves.
Concurrency needs a lease-based semaphore, which `limits` lacks: a sorted set per scope of
holder ids scored by lease expiry (Redis server time), taken for all scopes at once by one
Lua script, released in `finally`. Expired holders are swept on every acquire, so a killed
process cannot leak a slot for longer than its lease (the call's timeout plus a margin).

A call that cannot be admitted waits, polling with short jittered sleeps, for at most
`max_wait_s`; if it would have to wait longer it raises `RateLimited(retry_after=...)`, and
the task re-queues itself instead of holding a worker slot.

Known imprecisions, all on the safe side: limits are checked first and then taken one by
one, so a process that loses a race for the last slot of a later limit has already spent
one of an earlier limit (capacity is under-used, never exceeded); token costs are
estimates (prompt length / 4 + max_tokens) and are not refunded after the call.
Rate windows are stamped with each host's clock (the `limits` scripts take the caller's
time), so hosts must run NTP; concurrency leases use the Redis server's clock.
When Redis cannot be reached the call fails (closed): limits are never silently dropped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import redis
from limits import RateLimitItem, RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.storage import RedisStorage
from limits.strategies import MovingWindowRateLimiter, RateLimiter, SlidingWindowCounterRateLimiter

from conductor.config.connections import DEFAULT_LINKS, Links
from conductor.config.pool import Limits, ModelSpec, Pool
from conductor.config.settings import Settings
from conductor.domain.errors import RateLimited
from schedulers import keys

log = logging.getLogger(__name__)

# Takes one slot in every concurrency set at once, or none. Holders whose lease ran out are
# swept first, so a crashed process's slot comes back without anyone releasing it.
# KEYS: concurrency sets; ARGV: holder id, lease ms, then one cap per key.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  if redis.call('ZCARD', key) >= tonumber(ARGV[i + 2]) then
    return 0
  end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + lease, ARGV[1])
  -- the set itself must outlive its longest lease, never shorten it
  if redis.call('PTTL', key) < lease * 2 then
    redis.call('PEXPIRE', key, lease * 2)
  end
end
return 1
"""


@dataclass(frozen=True)
class _Rate:
    scope: str
    kind: str  # "requests" or "tokens"
    item: RateLimitItem
    strategy: RateLimiter

    @property
    def ids(self) -> tuple[str, str]:
        return keys.rate_identifiers(self.scope, self.kind)

    def describe(self) -> str:
        return f"{self.scope} {self.kind} {self.item}"


@dataclass
class _Plan:
    """Every limit one call must pass."""

    caps: list[tuple[str, int]] = field(default_factory=list)  # (scope, max in flight)
    rates: list[_Rate] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.caps or self.rates)


def has_limits(pool: Pool) -> bool:
    """Whether any provider or model of the pool declares a limit (else no limiter is needed)."""
    specs = [pool.conductor, *pool.workers]
    return any(_any(lim) for lim in [*pool.providers.values(), *(s.limits for s in specs)])


def cluster_limiter(settings: Settings, pool: Pool) -> RedisLimiter | None:
    """A `Runtime`'s limiter factory: cluster-wide limits when the pool declares any and a Redis
    is configured, else none."""
    url = settings.cluster_redis_url
    return RedisLimiter(url, pool, links=settings.links) if url and has_limits(pool) else None


def _any(lim: Limits) -> bool:
    return any(v is not None for v in lim.model_dump().values())


def model_scope(spec: ModelSpec) -> str:
    # Two servers behind one model name (hosted_vllm/qwen on two hosts) are separate quotas.
    return keys.model_scope(f"{spec.model}@{spec.api_base}" if spec.api_base else spec.model)


class RedisLimiter:
    """Admission for model calls under provider and model limits shared through Redis."""

    def __init__(
        self,
        redis_url: str,
        pool: Pool,
        *,
        max_wait_s: float = 10.0,
        poll_s: float = 0.05,
        lease_margin_s: float = 30.0,
        busy_retry_after_s: float = 1.0,
        links: Links = DEFAULT_LINKS,
    ) -> None:
        self.pool = pool
        self.max_wait_s = max_wait_s
        self.poll_s = poll_s
        self.lease_margin_s = lease_margin_s
        self.busy_retry_after_s = busy_retry_after_s
        self.client: redis.Redis = redis.Redis.from_url(redis_url, **links.redis_kwargs())
        self._acquire_script = self.client.register_script(_ACQUIRE)
        storage = RedisStorage(redis_url, key_prefix=keys.RATE_PREFIX, **links.redis_kwargs())
        self._exact = MovingWindowRateLimiter(storage)
        self._counter = SlidingWindowCounterRateLimiter(storage)
        self._storage = storage

    # -- CallLimiter -------------------------------------------------------------------
    @contextlib.contextmanager
    def slot(self, spec: ModelSpec, *, estimated_tokens: int) -> Iterator[None]:
        plan = self._plan(spec)
        if not plan:
            yield
            return
        holder = self._admit(spec, plan, max(1, estimated_tokens))
        try:
            yield
        finally:
            self._release(plan, holder)

    # -- what applies --------------------------------------------------------------------
    def _plan(self, spec: ModelSpec) -> _Plan:
        plan = _Plan()
        scoped = [
            (keys.provider_scope(spec.provider), self.pool.providers.get(spec.provider)),
            (model_scope(spec), spec.limits),
        ]
        for scope, lim in scoped:
            if lim is None:
                continue
            if lim.concurrency is not None:
                plan.caps.append((scope, lim.concurrency))
            if lim.rps is not None:
                plan.rates.append(_Rate(scope, "requests", RateLimitItemPerSecond(lim.rps), self._exact))
            if lim.rpm is not None:
                plan.rates.append(_Rate(scope, "requests", RateLimitItemPerMinute(lim.rpm), self._exact))
            if lim.tpm is not None:
                plan.rates.append(_Rate(scope, "tokens", RateLimitItemPerMinute(lim.tpm), self._counter))
        return plan

    def in_flight(self, scope: str) -> int:
        """Live holders of a concurrency cap (for status pages and tests)."""
        now_ms = int(time.time() * 1000)
        return int(self.client.zcount(keys.concurrency(scope), now_ms, "+inf"))

    def close(self) -> None:
        self.client.close()
        # The storage's client type (a protocol in `limits`) does not declare close().
        self._storage.get_connection().close()  # type: ignore[attr-defined]

    # -- admission -----------------------------------------------------------------------
    def _admit(self, spec: ModelSpec, plan: _Plan, tokens: int) -> str | None:
        deadline = time.monotonic() + self.max_wait_s
        holder = None
        if plan.caps:
            holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
            self._take_slots(spec, plan, holder, deadline)
        try:
            self._take_rates(spec, plan, tokens, deadline)
        except BaseException:
            self._release(plan, holder)
            raise
        return holder

    def _take_slots(self, spec: ModelSpec, plan: _Plan, holder: str, deadline: float) -> None:
        # The slot is held while waiting for the rate windows too, then for the call itself.
        lease_ms = int((self.max_wait_s + spec.timeout_s + self.lease_margin_s) * 1000)
        set_keys = [keys.concurrency(scope) for scope, _ in plan.caps]
        args: list[str | int] = [holder, lease_ms, *(cap for _, cap in plan.caps)]
        while not self._acquire_script(keys=set_keys, args=args):
            if time.monotonic() + self.poll_s > deadline:
                caps = ", ".join(f"{scope} concurrency {cap}" for scope, cap in plan.caps)
                # When a slot frees cannot be known; come back soon, spread out by jitter.
                retry = self.busy_retry_after_s * (1 + random.random())
                raise RateLimited(
                    f"{spec.model}: no free slot under {caps} within {self.max_wait_s:g}s", retry_after=round(retry, 3)
                )
            self._nap(self.poll_s)

    def _take_rates(self, spec: ModelSpec, plan: _Plan, tokens: int, deadline: float) -> None:
        while plan.rates:
            waits = [(self._wait_for(rate, self._cost(rate, tokens)), rate) for rate in plan.rates]
            wait, worst = max(waits, key=lambda w: w[0])
            if wait <= 0:
                # Every window had room a moment ago; take them in order. Losing a race for a
                # later one leaves the earlier ones spent: under-use, never over-admission.
                if all(r.strategy.hit(r.item, *r.ids, cost=self._cost(r, tokens)) for r in plan.rates):
                    return
                wait = self.poll_s
            elif time.monotonic() + wait > deadline:
                raise RateLimited(
                    f"{spec.model}: {worst.describe()} needs {wait:.2f}s, more than the "
                    f"{self.max_wait_s:g}s a call may wait",
                    retry_after=round(wait, 3),
                )
            self._nap(min(wait, max(self.poll_s, deadline - time.monotonic())))

    def _wait_for(self, rate: _Rate, cost: int) -> float:
        """0 when the window has room for `cost` now, else the seconds until it likely has."""
        if rate.strategy.test(rate.item, *rate.ids, cost=cost):
            return 0.0
        reset_at, _remaining = rate.strategy.get_window_stats(rate.item, *rate.ids)
        return min(max(reset_at - time.time(), self.poll_s), float(rate.item.get_expiry()))

    @staticmethod
    def _cost(rate: _Rate, tokens: int) -> int:
        # One call bigger than a whole window's token budget could never be admitted: let it
        # take the full window instead.
        return min(tokens, rate.item.amount) if rate.kind == "tokens" else 1

    def _release(self, plan: _Plan, holder: str | None) -> None:
        if holder is None:
            return
        try:
            with self.client.pipeline(transaction=False) as pipe:
                for scope, _ in plan.caps:
                    pipe.zrem(keys.concurrency(scope), holder)
                pipe.execute()
        except redis.RedisError:
            # The call itself is over; its lease expires on its own, so don't mask its outcome.
            log.warning("could not release concurrency slot %s; it frees when its lease expires", holder, exc_info=True)

    @staticmethod
    def _nap(seconds: float) -> None:
        # Jitter keeps many waiting processes from polling Redis in lockstep.
        time.sleep(max(0.0, seconds) * random.uniform(0.8, 1.2))
