"""The retrain trigger beat runs: start a training cycle when enough new rewarded traces exist
(counting only traces the cycle may train on: tenants that said no are left out).

Single-flight across the cluster: the check holds a Redis lock (when there is a Redis) and a
PostgreSQL advisory lock, and starts nothing while a cycle is queued or running, so two beats
racing start one cycle and a running cycle is never joined by a second.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from conductor.config.connections import Links
from conductor.config.settings import Settings
from conductor.store.models import Job, Reward, TrainingCycle
from conductor.store.queries import trainable_jobs

LOCK_KEY = "conductor:retrain:check"
ADVISORY_KEY = 7261002
LIVE = ("queued", "running")


@contextlib.contextmanager
def _redis_lock(redis_url: str | None, links: Links) -> Iterator[bool]:
    if not redis_url:
        yield True
        return
    import redis

    client = redis.Redis.from_url(redis_url, **links.redis_kwargs())
    lock = client.lock(LOCK_KEY, timeout=60, blocking=False, thread_local=False)
    got = bool(lock.acquire(blocking=False))
    try:
        yield got
    finally:
        if got:
            with contextlib.suppress(Exception):
                lock.release()
        client.close()


def maybe_start_retrain(sessions: sessionmaker[Session], settings: Settings, send: Callable[[int], None]) -> str:
    """Start (record and send) a cycle if one is due; returns what it decided, for the logs."""
    if not settings.retrain_enabled:
        return "disabled"
    with _redis_lock(settings.cluster_redis_url, settings.links) as got:
        if not got:
            return "another check holds the lock"
        with sessions.begin() as s:
            if s.get_bind().dialect.name == "postgresql":
                s.execute(select(func.pg_advisory_xact_lock(ADVISORY_KEY)))
            if s.scalar(select(func.count()).select_from(TrainingCycle).where(TrainingCycle.status.in_(LIVE))):
                return "a cycle is already queued or running"
            last = s.scalar(select(func.max(TrainingCycle.created_at)))
            new = (
                select(func.count())
                .select_from(Reward)
                .join(Job, Reward.job_id == Job.id)
                .where(Reward.chain_id.is_not(None), trainable_jobs(settings.train_on_tenant_data))
            )
            if last is not None:
                new = new.where(Reward.created_at > last)
            count = int(s.scalar(new) or 0)
            if count < settings.retrain_min_new_traces:
                return f"waiting: {count} of {settings.retrain_min_new_traces} new rewarded traces"
            row = TrainingCycle(trigger="beat", status="queued", stats={"new_traces": count})
            s.add(row)
            s.flush()
            cycle_id = row.id
        send(cycle_id)
        return f"started cycle {cycle_id} on {count} new rewarded traces"
