"""Which Conductor policy a process serves: the active checkpoint, read from the store with a short
cache, so every process of the fleet switches within seconds of a promotion, without a restart
and without a broadcast that a busy or restarting worker could miss."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: vLLM serves each checkpoint's adapter under its own name; a name is never reused for other weights.
LORA_NAME_PREFIX = "conductor-"


def lora_name(version: str) -> str:
    return f"{LORA_NAME_PREFIX}{version}"


@dataclass(frozen=True)
class ActivePolicy:
    version: str  #: the checkpoint id, recorded on every round it produces
    adapter_path: str  #: LoRA files on disk (the local backend loads them; vLLM was given them at promotion)


class ActivePolicyCache:
    """`read()` at most once per `ttl_s`; a failed read keeps the last known policy and logs one
    warning per run of failures (a store down for minutes would otherwise log every `ttl_s`)."""

    def __init__(self, read: Callable[[], ActivePolicy | None], ttl_s: float = 5.0) -> None:
        self._read = read
        self.ttl_s = ttl_s
        self._value: ActivePolicy | None = None
        self._at = -float("inf")
        self._lock = threading.Lock()
        self._failing = False

    def get(self) -> ActivePolicy | None:
        with self._lock:
            now = time.monotonic()
            if now - self._at >= self.ttl_s:
                try:
                    self._value = self._read()
                except Exception as exc:  # the store is briefly unreachable: keep serving what we serve
                    if not self._failing:
                        log.warning("reading the active policy failed, still serving %s: %r", self._serving(), exc)
                    self._failing = True
                else:
                    if self._failing:
                        log.info("reading the active policy works again, serving %s", self._serving())
                    self._failing = False
                self._at = now
            return self._value

    def _serving(self) -> str:
        return self._value.version if self._value else "the pool's own Conductor"
