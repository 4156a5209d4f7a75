"""Cluster health for `conductor status` (no job id): is a beat alive, did the reaper run
lately, how deep is each queue, who consumes it, and are finished jobs waiting for a score.

The beat writes `keys.BEAT_HEARTBEAT` with each renewal of its lock; the `conductor.reap` task
writes `keys.REAPER_LAST_RUN` each time it finishes. Both are plain epoch seconds.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from conductor.config.connections import DEFAULT_LINKS, Links
from schedulers import keys

#: The reaper counts as stale after this many of its intervals without a run.
STALE_INTERVALS = 3


def record_beat(client: Any, *, ttl_s: float) -> None:
    """Refresh the beat heartbeat (expires with the lock, so a dead beat's heartbeat ages out)."""
    client.set(keys.BEAT_HEARTBEAT, f"{time.time():.3f}", px=int(ttl_s * 3000))


def record_reaper_run(redis_url: str | None, links: Links = DEFAULT_LINKS) -> None:
    """Note that the reaper just ran (no-op without Redis; never fails the reaper)."""
    if redis_url is None:
        return
    import redis

    with (
        contextlib.suppress(redis.RedisError),
        redis.Redis.from_url(redis_url, **links.redis_kwargs(socket_timeout_s=2)) as client,
    ):
        client.set(keys.REAPER_LAST_RUN, f"{time.time():.3f}")


def _age(client: Any, key: str, now: float) -> float | None:
    raw = client.get(key)
    return None if raw is None else round(max(0.0, now - float(raw)), 1)


def redis_health(
    redis_url: str, *, reaper_interval_s: float, queues: tuple[str, ...], links: Links = DEFAULT_LINKS
) -> dict[str, Any]:
    """Beat heartbeat, reaper age and queue depths from Redis, with a warning for each problem."""
    import redis

    now = time.time()
    with redis.Redis.from_url(redis_url, **links.redis_kwargs(socket_timeout_s=3)) as client:
        beat_age = _age(client, keys.BEAT_HEARTBEAT, now)
        reaper_age = _age(client, keys.REAPER_LAST_RUN, now)
        depths = {q: int(client.llen(q)) for q in queues}
    warnings = []
    if beat_age is None:
        warnings.append("no beat is running: start exactly one `conductor beat` (it runs the reaper)")
    horizon = STALE_INTERVALS * reaper_interval_s
    if reaper_age is None:
        warnings.append("the reaper has never run: is a `conductor beat` and a worker on the `default` queue up?")
    elif reaper_age > horizon:
        warnings.append(
            f"the reaper last ran {reaper_age:.0f}s ago (interval {reaper_interval_s:g}s): "
            "check `conductor beat` and the workers on the `default` queue"
        )
    return {"beat_last_seen_s": beat_age, "reaper_last_run_s": reaper_age, "queue_depth": depths, "warnings": warnings}


def consumers(app: Any, *, timeout_s: float = 1.0) -> dict[str, list[str]] | None:
    """Queue name -> the Celery hosts consuming it (None if no host answered in time)."""
    with contextlib.suppress(Exception):
        replies = app.control.inspect(timeout=timeout_s).active_queues() or {}
        out: dict[str, list[str]] = {}
        for host, qs in replies.items():
            for q in qs or []:
                out.setdefault(q["name"], []).append(host)
        return out
    return None
