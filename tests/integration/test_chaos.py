"""Chaos in CI: 40 problems on Redis + PostgreSQL (private instances), 3 worker processes and beat,
one fault of each kind (SIGKILLed worker, Redis restart without persistence, PostgreSQL restart,
provider 429/500/timeout windows). Nothing may be lost, stuck or recorded twice."""

from __future__ import annotations

import pytest

from tests.support.chaos import run_chaos, services_missing
from tests.support.chaos_report import worker_logs

pytestmark = pytest.mark.services


def test_a_batch_survives_killed_workers_restarted_services_and_a_failing_provider(tmp_path):
    missing = services_missing()
    if missing:
        pytest.skip(missing)
    summary = run_chaos(tmp_path, problems=40, seed=3, workers=3, threads=4, events=1, window_s=20.0, timeout_s=240)
    print(summary.render())
    assert summary.ok, summary.render() + "\n" + worker_logs(tmp_path)
    assert summary.done > 0 and len(summary.events) == 6
