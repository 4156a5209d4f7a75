"""At most N model calls in flight in one process, taken by threads only for the call itself.

A worker process runs more threads than call slots, so a thread that finished its call records
the step and leases the next while another thread calls (issue 30: a slot that waits on database
work is a model slot lost). A freed slot is handed to a waiting thread directly (no barging by a
thread that arrives later), Conductor calls first: a plan unlocks a whole workflow, a worker step at
most the rest of one.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class CallSlots:
    def __init__(self, n: int) -> None:
        self._free = n
        self._lock = threading.Lock()
        self._waiting: list[tuple[int, int, threading.Event]] = []  # (class, arrival, its wake-up)
        self._arrival = itertools.count()

    @contextmanager
    def slot(self, *, conductor: bool = False) -> Iterator[None]:
        with self._lock:
            if self._free and not self._waiting:
                self._free -= 1
                wake = None
            else:
                wake = threading.Event()
                heapq.heappush(self._waiting, (0 if conductor else 1, next(self._arrival), wake))
        if wake is not None:
            wake.wait()  # handed a slot by the call that freed it
        try:
            yield
        finally:
            with self._lock:
                if self._waiting:
                    heapq.heappop(self._waiting)[2].set()
                else:
                    self._free += 1


class NoSlots:
    @contextmanager
    def slot(self, *, conductor: bool = False) -> Iterator[None]:
        yield
