"""Given two separate worker processes sharing one provider limit, the limit holds across both."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.schedulers._hammer import CONCURRENCY, RPS
from tests.support.scripted_llm import Reply, ScriptedLLMServer

pytestmark = pytest.mark.services
REPO = Path(__file__).resolve().parents[2]
THREADS, CALLS = 3, 3  # per process: 2 x 3 x 3 = 18 calls, ~3.5 s at 5 per second


def _max_in_any_window(times: list[float], width: float) -> int:
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while t - times[lo] >= width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = now = 0
    for _, step in edges:  # at equal times an end sorts before a start: touching is not overlapping
        now += step
        best = max(best, now)
    return best


def test_rate_and_concurrency_hold_across_two_processes(redis_db):
    # Each call takes 0.3 s: two at a time could do ~6.7/s, so the 5/s rate is what binds,
    # and consecutive calls overlap, so the concurrency cap is reached too.
    server = ScriptedLLMServer(lambda model, messages, body: Reply("ok", delay_s=0.3)).start()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.schedulers._hammer", redis_db, server.base_url, str(THREADS), str(CALLS)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready"
        for p in procs:  # both start hammering together
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [json.loads(p.communicate(timeout=60)[0].strip().splitlines()[-1]) for p in procs]
    finally:
        for p in procs:
            p.kill()
        server.stop()

    assert [r["errors"] for r in results] == [[], []]
    calls = server.calls_for("scripted-worker-alpha")
    assert len(calls) == 2 * THREADS * CALLS
    a, b = (sorted(r["admitted"]) for r in results)
    # Both processes were competing at once: each began asking before the other was done.
    # (Which one wins each slot is up to the limiter; fairness is not what this test is about.)
    began_a, began_b = (r["began"] for r in results)
    assert began_a < b[-1] and began_b < a[-1], "the two processes should have competed at the same time"

    timeline = [(round(c.started - calls[0].started, 3), round(c.ended - calls[0].started, 3)) for c in calls]
    assert _max_overlap([(c.started, c.ended) for c in calls]) == CONCURRENCY, (
        f"the cap must hold across processes (and be reached): {timeline}"
    )
    admitted = a + b
    # Admission is exact (the moving window); arrival at the server adds client-side jitter.
    assert _max_in_any_window(admitted, 0.95) <= RPS, sorted(admitted)
    assert _max_in_any_window([c.started for c in calls], 0.8) <= RPS, timeline
    assert max(admitted) - min(admitted) >= (len(admitted) - RPS) / RPS - 0.1
