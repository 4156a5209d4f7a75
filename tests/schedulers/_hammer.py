"""A separate worker process for the cluster-limit tests: many threads calling one provider.

Run as `python -m tests.schedulers._hammer REDIS_URL BASE_URL THREADS CALLS`. It prints
`ready` once imported, waits for a line on stdin (so both processes start together), makes
THREADS x CALLS worker calls through the real Gateway with a RedisLimiter, and prints one
JSON line: the wall-clock times at which each call was admitted.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from conductor.config.pool import ModelSpec, Pool

CONCURRENCY = 2
RPS = 5


def limited_pool(
    base_url: str, *, providers: dict | None = None, alpha_limits: dict | None = None, timeout_s: float = 10.0
) -> Pool:
    """The scripted pool with limits: by default the `openai` provider capped as in these tests."""
    common = {"api_base": base_url, "retries": 0, "timeout_s": timeout_s}
    return Pool.model_validate(
        {
            "conductor": {"model": "openai/scripted-conductor", **common, "policy_version": "scripted-v0"},
            "workers": [
                {
                    "name": "alpha",
                    "model": "openai/scripted-worker-alpha",
                    "description": "fast generalist",
                    "limits": alpha_limits or {},
                    **common,
                },
                {"name": "beta", "model": "openai/scripted-worker-beta", "description": "careful checker", **common},
            ],
            "providers": {"openai": {"concurrency": CONCURRENCY, "rps": RPS}} if providers is None else providers,
        }
    )


class RecordingLimiter:
    """Delegates to the real limiter and notes when each call got through."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.admitted: list[float] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def slot(self, spec: ModelSpec, *, estimated_tokens: int) -> Iterator[None]:
        with self.inner.slot(spec, estimated_tokens=estimated_tokens):
            with self._lock:
                self.admitted.append(time.time())
            yield


def main(redis_url: str, base_url: str, threads: int, calls: int) -> None:
    from conductor.inference.gateway import Gateway
    from schedulers.limits import RedisLimiter

    pool = limited_pool(base_url)
    limiter = RecordingLimiter(RedisLimiter(redis_url, pool, max_wait_s=60))
    gateway = Gateway(pool, model_home=Path("."), limiter=limiter)
    # litellm's first call in a process is slow (client setup): take it before the clock
    # starts, outside the limits, so admission and arrival at the server stay close.
    Gateway(pool, model_home=Path(".")).call_worker("beta", [{"role": "user", "content": "warm up"}])
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.time()  # from here on this process is asking for admission
    errors: list[str] = []

    def run() -> None:
        for _ in range(calls):
            try:
                gateway.call_worker("alpha", [{"role": "user", "content": "hi"}])
            except Exception as exc:  # reported to the test, which fails on any
                errors.append(repr(exc))

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    print(json.dumps({"began": began, "admitted": limiter.admitted, "errors": errors}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
