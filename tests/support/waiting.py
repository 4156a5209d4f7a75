"""Polling helpers for tests that watch a deployment from outside."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from conductor.store.models import TrainingCycle

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout: float, every: float = 0.5) -> T:
    """`check()`'s first truthy value, polled every `every` seconds; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def ended_cycle(sessions: sessionmaker[Session]) -> Callable[[], TrainingCycle | None]:
    """A check for `wait_for`: the first training cycle that ended (done, skipped or failed), detached."""

    def check() -> TrainingCycle | None:
        with sessions() as s:
            row = s.scalar(select(TrainingCycle).where(TrainingCycle.status.in_(("done", "skipped", "failed"))))
            if row is not None:
                s.expunge(row)
            return row

    return check
