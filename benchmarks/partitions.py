"""Hosts that lose each other: two worker hosts (network namespaces on a private bridge, beat on
the first) and an API host (`conductor api`) on a private Redis and PostgreSQL, while a seeded
driver cuts a host from Redis, cuts a host from PostgreSQL (silent DROPs longer than the step
lease), kills a whole host and brings it back, and, beside those, cuts the API host from
PostgreSQL, from Redis, and from its client, each in the middle of a Batch API upload. Prints, per
fault, how long until the host finished a step again and until the cluster's throughput recovered
(the API faults: what the client saw, and how long until the API served again and a retried upload
and batch succeeded), and asserts: every job done or failed with a reason, 0 lost, 0 step outputs
written twice, no hung worker, nothing half-uploaded left usable, every API batch line ended. Needs
root, iproute2 and nftables.

    python benchmarks/partitions.py --problems 200 --seed 7
    python benchmarks/partitions.py --problems 200 --shipped-links   # the default timeouts, not CI's
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.support import hosts
from tests.support.chaos import services_missing
from tests.support.chaos_report import worker_logs
from tests.support.partitions import run_partitions


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--in-flight", type=int, default=8, help="Jobs the feeder keeps running at once.")
    ap.add_argument("--threads", type=int, default=4, help="Threads of each host's worker.")
    ap.add_argument(
        "--faults", type=int, default=6, choices=range(7), help="How many of the six faults (a seeded shuffle) to run."
    )
    ap.add_argument("--partition", type=float, default=15.0, help="Seconds each partition lasts.")
    ap.add_argument("--delay", type=float, default=2.0, help="Seconds each worker model call takes.")
    ap.add_argument("--shipped-links", action="store_true", help="The default connection timeouts, not CI's.")
    ap.add_argument("--timeout", type=float, default=1800.0)
    args = ap.parse_args()
    missing = services_missing() or hosts.missing()
    if missing:
        print(f"partitions skipped: {missing}")
        return
    work = Path(tempfile.mkdtemp(prefix="partitions-"))
    summary = run_partitions(
        work,
        problems=args.problems,
        seed=args.seed,
        threads=args.threads,
        in_flight=args.in_flight,
        faults=args.faults,
        partition_s=args.partition,
        delay_s=args.delay,
        links={} if args.shipped_links else None,
        timeout_s=args.timeout,
    )
    print(f"\n## partitions, seed {args.seed}, {args.problems} problems, 2 worker hosts (beat on h1) and an API host\n")
    print(summary.render())
    if not summary.ok:
        print(worker_logs(work))
        sys.exit(1)


if __name__ == "__main__":
    main()
