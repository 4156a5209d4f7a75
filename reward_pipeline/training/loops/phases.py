"""Where a training cycle's time goes: wall seconds per phase, recorded with the cycle itself."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def timed(seconds: dict[str, float], phase: str) -> Iterator[None]:
    """Adds the wall time of the block to ``seconds[phase]`` (also when the block raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds[phase] = round(seconds.get(phase, 0.0) + time.perf_counter() - start, 2)
