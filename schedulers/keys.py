"""Every Redis key this project writes outside Celery's own, in one place.

All keys share one prefix so an operator can find (or flush) them with one `SCAN MATCH`.
Scopes are `provider:<name>` or `model:<litellm model string>`; keys are built only here.
"""

from __future__ import annotations

PREFIX = "conductor"

#: Prefix handed to `limits.storage.RedisStorage`: its rate-window keys live under it
#: (`conductor:limits:LIMITER/<scope>/<kind>/<amount>/<multiples>/<granularity>`).
RATE_PREFIX = f"{PREFIX}:limits"


def provider_scope(provider: str) -> str:
    return f"provider:{provider}"


def model_scope(model: str) -> str:
    return f"model:{model}"


def concurrency(scope: str) -> str:
    """Sorted set of the holders of one concurrency cap, scored by lease expiry (ms)."""
    return f"{PREFIX}:conc:{scope}"


def rate_identifiers(scope: str, kind: str) -> tuple[str, str]:
    """Identifiers passed to a `limits` strategy for one window (kind: requests or tokens)."""
    return scope, kind


#: Held by the one running `conductor beat`; a second beat refuses to start while it exists.
BEAT_LOCK = f"{PREFIX}:beat:lock"

#: Refreshed by the running beat with each lock renewal (epoch seconds); expires with it.
BEAT_HEARTBEAT = f"{PREFIX}:beat:heartbeat"

#: When the reaper last ran to the end (epoch seconds), written by the `conductor.reap` task.
REAPER_LAST_RUN = f"{PREFIX}:reaper:last_run"
