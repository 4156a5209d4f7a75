"""Hosts that lose each other, in CI: two worker hosts (network namespaces, beat on one) on a private
Redis and PostgreSQL. A host is cut from Redis and a host from PostgreSQL by silent DROPs longer than
the step lease, and a whole host is killed and brought back. Every job ends done or failed with a
reason, none is lost, no step output is written twice, and each faulted host consumes again soon
after its heal (no worker hangs on a dead connection)."""

from __future__ import annotations

import pytest

from tests.support import hosts
from tests.support.chaos import services_missing
from tests.support.chaos_report import worker_logs
from tests.support.partitions import run_partitions

pytestmark = [pytest.mark.services, pytest.mark.hosts]


def test_a_batch_survives_partitions_from_redis_and_postgres_and_a_vanished_host(tmp_path):
    if missing := services_missing() or hosts.missing():
        pytest.skip(missing)
    summary = run_partitions(tmp_path, problems=60, seed=11, in_flight=6, timeout_s=420)
    print(summary.render())
    assert summary.ok, summary.render() + "\n" + worker_logs(tmp_path)
    assert sorted(f.kind for f in summary.faults_timed) == ["kill", "postgres", "redis"]
    for fault in summary.faults_timed:
        assert fault.host_consumes_s is not None and fault.host_consumes_s < 20, fault
