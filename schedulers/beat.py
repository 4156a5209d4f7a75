"""Celery beat: the periodic work (the reaper; retrain trigger and cleanup join it later).

Exactly one beat may run: two would enqueue every periodic task twice. With a Redis broker
the running beat holds a Redis lock that it keeps renewing; a second one exits at once with
a clear error, and a beat that dies loses the lock after `BEAT_LOCK_TTL_S`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from conductor.config.settings import Settings
from conductor.domain.errors import ConfigError
from schedulers import keys
from tasks.names import TaskName

BEAT_LOCK_TTL_S = 60


def beat_schedule(settings: Settings) -> dict:
    return {
        "reap-lost-work": {"task": TaskName.REAP.value, "schedule": settings.reaper_interval_s},
    }


@contextlib.contextmanager
def single_beat(redis_url: str | None, *, ttl_s: int = BEAT_LOCK_TTL_S) -> Iterator[None]:
    """Hold the beat lock for as long as the block runs; refuse if another beat holds it."""
    if redis_url is None:
        yield  # embedded mode: one process, nothing to coordinate
        return
    import redis

    client = redis.Redis.from_url(redis_url)
    lock = client.lock(keys.BEAT_LOCK, timeout=ttl_s)
    if not lock.acquire(blocking=False):
        raise ConfigError(f"another `conductor beat` holds {keys.BEAT_LOCK}: run exactly one beat")
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl_s / 3):
            lock.extend(ttl_s, replace_ttl=True)

    renewer = threading.Thread(target=renew, name="beat-lock", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            lock.release()
        client.close()


def run_beat(settings: Settings, *, loglevel: str = "INFO") -> None:
    from tasks.app import create_app

    app = create_app(settings)
    app.conf.beat_schedule = beat_schedule(settings)
    with single_beat(settings.cluster_redis_url):
        app.Beat(loglevel=loglevel, schedule=str(settings.home / "celerybeat-schedule")).run()
