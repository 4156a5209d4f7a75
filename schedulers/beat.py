"""Celery beat: the periodic work (the reaper, the Batch API sweep, the retrain trigger, retention).

Exactly one beat may run: two would enqueue every periodic task twice. With a Redis broker
the running beat holds a Redis lock that a background thread renews every third of its TTL; a
second beat exits at once with a clear error, and a beat that dies loses the lock after
`BEAT_LOCK_TTL_S`. The lock is not thread-local (redis-py's default keeps the token in the
thread that acquired it, so a renewal from another thread would fail). If the lock key
vanishes (Redis restarted without persistence) the beat takes it again; if another beat holds
it, this one stops. Each renewal also writes the beat heartbeat that `conductor status` reads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from conductor.config.connections import DEFAULT_LINKS, Links
from conductor.config.settings import Settings
from conductor.domain.errors import ConfigError
from schedulers import health, keys
from tasks.names import TaskName

if TYPE_CHECKING:
    from celery import Celery

BEAT_LOCK_TTL_S = 60

log = logging.getLogger(__name__)


def beat_schedule(settings: Settings) -> dict:
    schedule: dict = {
        "reap-lost-work": {"task": TaskName.REAP.value, "schedule": settings.reaper_interval_s},
        # Batch API batches move along here, not in the API process (expiry, finalize, lost reads).
        # A sweep still queued when the next one is due is dropped: sweeps never pile up.
        "sweep-batches": {
            "task": TaskName.BATCH_SWEEP.value,
            "schedule": settings.batch_sweep_s,
            "options": {"expires": max(settings.batch_sweep_s, 1.0)},
        },
    }
    if settings.retention_days is not None:
        schedule["retention"] = {
            "task": TaskName.RETENTION.value,
            "schedule": settings.retention_check_s,
            # The period travels with the task: a worker started without CONDUCTOR_RETENTION_DAYS
            # would otherwise find nothing to do, run after run, and say nothing.
            "kwargs": {"retention_days": settings.retention_days},
            "options": {"expires": settings.retention_check_s},
        }
    if settings.retrain_enabled:
        schedule["retrain-check"] = {"task": TaskName.RETRAIN_CHECK.value, "schedule": settings.retrain_check_s}
    return schedule


def embedded_periodic(settings: Settings) -> dict[str, float]:
    """Task name -> seconds: what the embedded worker sends itself in beat's place (it has no beat
    process; its reaper is its own setting): the batch sweep, and retention when one is set."""
    periodic = {TaskName.BATCH_SWEEP.value: settings.batch_sweep_s}
    if settings.retention_days is not None:
        periodic[TaskName.RETENTION.value] = settings.retention_check_s
    return periodic


def _stop_this_process() -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # Celery beat leaves its loop cleanly on SIGTERM


@contextlib.contextmanager
def single_beat(
    redis_url: str | None,
    *,
    ttl_s: float = BEAT_LOCK_TTL_S,
    on_lost: Callable[[], None] | None = None,
    links: Links = DEFAULT_LINKS,
) -> Iterator[None]:
    """Hold the beat lock for as long as the block runs; refuse if another beat holds it.

    ``on_lost`` runs (in the renewal thread) when another beat took the lock; by default
    nothing but an error log, `run_beat` passes a SIGTERM to itself.
    """
    if redis_url is None:
        yield  # embedded mode: one process, nothing to coordinate
        return
    import redis
    from redis.exceptions import LockError

    client = redis.Redis.from_url(redis_url, **links.redis_kwargs(socket_timeout_s=max(1.0, ttl_s / 3)))
    lock = client.lock(keys.BEAT_LOCK, timeout=ttl_s, thread_local=False)
    while True:  # like a worker, wait for the broker at start instead of exiting (chaos found this)
        try:
            acquired = lock.acquire(blocking=False)
            break
        except redis.ConnectionError as exc:
            log.warning("beat is waiting for Redis at start: %s", exc)
            time.sleep(1.0)
    if not acquired:
        raise ConfigError(f"another `conductor beat` holds {keys.BEAT_LOCK}: run exactly one beat")
    health.record_beat(client, ttl_s=ttl_s)
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl_s / 3):
            try:
                try:
                    lock.extend(ttl_s, replace_ttl=True)
                except LockError:
                    # The key is gone (Redis restarted empty) or someone else's: take it back
                    # if it is free, else another beat runs and this one must stop.
                    if not lock.acquire(blocking=False):
                        log.error("beat lock %s is held by another beat: stopping this one", keys.BEAT_LOCK)
                        if on_lost is not None:
                            on_lost()
                        return
                    log.warning("beat lock %s was lost (Redis restarted?) and has been re-acquired", keys.BEAT_LOCK)
                health.record_beat(client, ttl_s=ttl_s)
            except redis.RedisError as exc:  # Redis briefly away: keep trying until the TTL tells
                log.warning("could not renew the beat lock: %s", exc)

    renewer = threading.Thread(target=renew, name="beat-lock", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join(timeout=5)
        with contextlib.suppress(Exception):
            lock.release()
        client.close()


def run_beat(app: Celery, settings: Settings, *, loglevel: str = "INFO") -> None:
    """Run beat on `app` (the entry point's Celery app) until the process is told to stop."""
    app.conf.beat_schedule = beat_schedule(settings)
    settings.home.mkdir(parents=True, exist_ok=True)  # the schedule file lives there
    with single_beat(settings.cluster_redis_url, on_lost=_stop_this_process, links=settings.links):
        while True:
            try:
                app.Beat(loglevel=loglevel, schedule=str(settings.home / "celerybeat-schedule")).run()
                return
            except Exception as exc:
                # A broker restart must not end the reaper (chaos: beat exited at a Redis restart
                # and lost work was never re-sent). Start the loop again; the lock is still ours.
                if not _broker_down(exc):
                    raise
                log.warning("beat lost the broker (%s); starting again in 1 s", exc)
                time.sleep(1.0)


def _broker_down(exc: BaseException) -> bool:
    link: BaseException | None = exc
    while link is not None:
        if type(link).__module__.split(".")[0] in ("redis", "kombu", "amqp") or isinstance(link, ConnectionError):
            return True
        link = link.__cause__ or link.__context__
    return False
