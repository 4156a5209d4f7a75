"""Hosts that lose each other, in CI: two worker hosts (network namespaces, beat on one) and an API
host on a private Redis and PostgreSQL. A host is cut from Redis and a host from PostgreSQL by silent
DROPs longer than the step lease, and a whole host is killed and brought back. Every job ends done
or failed with a reason, none is lost, no step output is written twice, and each faulted host
consumes again soon after its heal (no worker hangs on a dead connection).

Beside those, the API host is cut from PostgreSQL, from Redis, and from its client, each in the
middle of a Batch API upload: the client sees a clean answer (a 503, a created batch, or its own
timeout), nothing half-written is left usable, the API serves again soon after each heal, a retried
upload and batch succeed, and every line of every batch the client created ends."""

from __future__ import annotations

import pytest

from tests.support import hosts
from tests.support.api_partition import API_FAULTS
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
    assert sorted(f.kind for f in summary.api_faults) == sorted(API_FAULTS)
    for api_fault in summary.api_faults:
        assert api_fault.serves_s is not None and api_fault.serves_s < 10, api_fault
        # A 503 to retry (or a success), never a bare server error.
        assert not any(seen.startswith("500") for seen in api_fault.upload.split("; ")), api_fault
