"""Chaos: a batch on Redis + PostgreSQL with 3 worker processes and beat, under seeded faults.

A driver, with a seed, at random times: SIGKILLs workers (and restarts them), restarts Redis
(no persistence: every queued message is gone), restarts PostgreSQL (an immediate stop, like a
crash), and makes the scripted provider answer 429 with Retry-After, 500s and timeouts for a
window. Private Redis and PostgreSQL instances (own port, own data folder): the shared ones
are never touched. Prints and asserts: finished + failed-with-reason = submitted, 0 lost,
0 step outputs written twice (an audit trigger on steps.output), 0 tasks stuck, re-deliveries.

    python benchmarks/chaos.py --problems 200 --events 2 --seed 7
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tests.support.chaos import run_chaos, services_missing
from tests.support.chaos_report import worker_logs


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--events", type=int, default=2, help="Faults of each kind.")
    ap.add_argument("--window", type=float, default=40.0, help="Seconds over which the faults are spread.")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900.0)
    args = ap.parse_args()
    missing = services_missing()
    if missing:
        print(f"chaos skipped: {missing}")
        return
    work = Path(tempfile.mkdtemp(prefix="chaos-"))
    summary = run_chaos(
        work,
        problems=args.problems,
        seed=args.seed,
        workers=args.workers,
        events=args.events,
        window_s=args.window,
        timeout_s=args.timeout,
    )
    print(f"\n## chaos, seed {args.seed}, {args.problems} problems, {args.workers} workers + beat\n")
    print(summary.render())
    if not summary.ok:
        print(worker_logs(work))
        sys.exit(1)


if __name__ == "__main__":
    main()
