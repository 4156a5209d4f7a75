"""Math-answer verifier: mathematical equivalence of a free-text answer and a LaTeX reference,
decided by ``math-verify`` (``\\frac{1}{2}``, ``0.5`` and ``\\dfrac12`` are the same answer).

Why a worker process: math-verify bounds parsing and comparison with ``signal.alarm``, which only
works in the main thread, and the reward worker calls verifiers from other threads. So both of
its timeouts are switched off (``parsing_timeout=None``, ``timeout_seconds=None``) and the check
runs in a long-lived child process (``_math_worker``, one JSON line per request) that the
caller waits on with a wall-clock timeout; on timeout the child is killed and replaced. The
child also has an address-space limit, so an answer like ``9^{9^{9^9}}`` can neither hang nor
exhaust memory in the caller. Children are started with ``subprocess`` (no ``fork`` of a
threaded parent, no re-import of ``__main__``), lazily, at most ``size`` per pool, and reused:
a check costs one pipe round trip instead of a sympy import.

Answer selection is math-verify's: it prefers ``\\boxed{}`` and "final answer is" anchors; several
boxed answers are read as a set (so hedging with two boxes does not match a single reference).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Any

from conductor.domain.errors import MathCheckTimeout, VerifierError
from conductor.domain.problem import Problem
from reward_pipeline.verifiers.base import Verdict, bare_math_candidates, extract_boxed

__all__ = ["MathCheckTimeout", "MathVerifier", "MathWorkerPool", "default_pool"]


_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


class _Worker:
    def __init__(self, memory_bytes: int, startup_timeout_s: float) -> None:
        env = dict(os.environ)
        # The child must import this package even when it is used from a source checkout.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reward_pipeline.verifiers._math_worker", str(memory_bytes)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        self._buf = b""
        try:
            hello = self._readline(startup_timeout_s)
        except (MathCheckTimeout, EOFError) as e:
            self.kill()
            raise VerifierError(f"math-verify worker did not start: {e!r}") from e
        if not json.loads(hello).get("ready"):
            self.kill()
            raise VerifierError("math-verify worker sent an unexpected greeting")

    def _readline(self, timeout_s: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise MathCheckTimeout(f"no reply within {timeout_s:g}s")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise EOFError("math-verify worker exited")
                self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def request(self, payload: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(payload) + "\n").encode())
        self.proc.stdin.flush()
        return json.loads(self._readline(timeout_s))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            self.proc.kill()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                if f:
                    f.close()
            except OSError:
                pass

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()  # EOF makes the worker leave its loop
            self.proc.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


_pools: weakref.WeakSet[MathWorkerPool] = weakref.WeakSet()


class MathWorkerPool:
    """Up to ``size`` math-verify child processes shared by all threads of this process."""

    def __init__(self, size: int = 2, *, memory_bytes: int = 2 << 30, startup_timeout_s: float = 60.0) -> None:
        self.size = size
        self.memory_bytes = memory_bytes
        self.startup_timeout_s = startup_timeout_s
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(size)
        self._pid = os.getpid()
        _pools.add(self)

    def _take(self) -> _Worker:
        if os.getpid() != self._pid:
            # Forked copy (e.g. a prefork pool child): the pipes belong to the parent's workers.
            self._idle, self._pid = [], os.getpid()
        with self._lock:
            while self._idle:
                w = self._idle.pop()
                if w.alive():
                    return w
        return _Worker(self.memory_bytes, self.startup_timeout_s)

    def check(
        self,
        gold: str,
        pred: str,
        *,
        timeout_s: float,
        float_rounding: int = 6,
        first: list[str] | None = None,
        then: list[str] | None = None,
    ) -> dict[str, Any]:
        """One equivalence check; raises MathCheckTimeout (worker killed) or VerifierError.

        ``first``: formulas to try before math-verify's own extraction from ``pred`` (an
        undelimited "the answer is \\frac{7}{4}"); ``then``: formulas to try when it finds none.
        """
        payload = {"gold": gold, "pred": pred, "float_rounding": float_rounding, "first": first or [],
                   "then": then or []}  # fmt: skip
        with self._slots:
            w = self._take()
            try:
                reply = w.request(payload, timeout_s)
            except MathCheckTimeout:
                w.kill()
                raise
            except (EOFError, OSError, ValueError) as e:
                w.kill()
                raise VerifierError(f"math-verify worker failed: {e!r}") from e
            with self._lock:
                self._idle.append(w)
            return reply

    def warm(self, n: int | None = None) -> None:
        """Start workers now so the first checks don't pay for the sympy import."""
        started = [self._take() for _ in range(min(n or self.size, self.size))]
        with self._lock:
            self._idle.extend(started)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        if os.getpid() == self._pid:
            for w in idle:
                w.close()


_default_pool: MathWorkerPool | None = None
_default_lock = threading.Lock()


def default_pool() -> MathWorkerPool:
    """The process-wide pool (size = CPU count, at least 2), created on first use."""
    global _default_pool
    with _default_lock:
        if _default_pool is None:
            _default_pool = MathWorkerPool(size=max(2, os.cpu_count() or 2))
        return _default_pool


@atexit.register
def _close_all() -> None:
    for pool in list(_pools):
        pool.close()


class MathVerifier:
    """Correct when math-verify finds the answer equivalent to ``problem.answer``."""

    name = "math"

    def __init__(self, *, timeout_s: float = 10.0, float_rounding: int = 6, pool: MathWorkerPool | None = None) -> None:
        self.timeout_s = timeout_s
        self.float_rounding = float_rounding
        self._pool = pool

    @property
    def pool(self) -> MathWorkerPool:
        return self._pool or default_pool()

    def verify(self, answer: str, problem: Problem) -> Verdict:
        gold = (problem.answer or "").strip()
        if not gold:
            raise VerifierError(f"problem {problem.id or '?'} has no reference answer for the math verifier")
        details: dict[str, Any] = {"expected": gold}
        if not answer or not answer.strip():
            return Verdict(False, self.name, "empty answer", details | {"extracted": None})
        try:
            anchored, loose = ([], []) if extract_boxed(answer) else bare_math_candidates(answer)
            reply = self.pool.check(
                gold,
                answer,
                timeout_s=self.timeout_s,
                float_rounding=self.float_rounding,
                first=anchored,
                then=loose,
            )
        except MathCheckTimeout:
            return Verdict(
                False,
                self.name,
                f"timeout after {self.timeout_s:g}s while comparing with math-verify",
                details | {"timed_out": True, "extracted": None},
            )
        if reply.get("error") and not reply.get("gold"):
            if reply["error"].startswith("could not parse the reference"):
                raise VerifierError(f"math-verify cannot parse the reference answer {gold!r}")
            return Verdict(False, self.name, f"math-verify failed: {reply['error']}", details | {"extracted": None})
        extracted = reply["pred"][-1] if reply["pred"] else None
        details |= {"extracted": extracted, "parsed_expected": reply["gold"], "parsed_answer": reply["pred"]}
        if extracted is None:
            return Verdict(False, self.name, f"no answer found in the text, expected {gold}", details)
        if reply["equal"]:
            return Verdict(True, self.name, f"extracted {extracted}, equivalent to expected {gold}", details)
        return Verdict(False, self.name, f"extracted {extracted}, not equivalent to expected {gold}", details)
