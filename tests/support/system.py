"""A whole running system for a test, from the composition root (`conductor.system`): store, pool,
Celery app and in-process worker, service."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conductor.config.pool import Pool
from conductor.config.settings import Settings
from conductor.system import System, running_system

__all__ = ["System", "embedded_system", "make_settings"]


def make_settings(home: Path, **overrides: Any) -> Settings:
    defaults: dict[str, Any] = {"home": home, "broker_url": "memory://"}
    defaults.update(overrides)
    return Settings(**defaults)


@contextmanager
def embedded_system(home: Path, pool: Pool, *, concurrency: int = 4, **overrides: Any) -> Iterator[System]:
    settings = make_settings(home, **overrides)
    with running_system(settings, pool=pool, worker=True, concurrency=concurrency) as system:
        yield system
