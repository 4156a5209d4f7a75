"""How many jobs/s one PostgreSQL carries: pgbench runs `fanout_job.sql` (one job's hot statements,
as the engine issues them) at several client counts against a scratch database migrated to the
current schema, and prints jobs/s, statements/s and commits/s per client count (docs/capacity.md).

    python benchmarks/pgbench/run.py                          # 1, 4, 8, 16 clients, 10 s each
    python benchmarks/pgbench/run.py --clients 1,32 --seconds 30 --pg postgresql+psycopg://root@dbhost/postgres

Each pgbench "transaction" is the whole script, so its tps is jobs/s. pgbench runs on the same
machine as the server here: on a shared machine the figures are a lower bound.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

SCRIPT = Path(__file__).with_name("fanout_job.sql")
STATEMENTS, COMMITS = 33, 12  #: per job of the script (benchmarks/step_cost.py --workflow fanout --statements)


def pgbench_binary() -> str:
    found = shutil.which("pgbench") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/pgbench"))), None)
    if found is None:
        raise SystemExit("no pgbench on PATH or under /usr/lib/postgresql/*/bin")
    return found


def scratch_database(admin_url: str, name: str) -> str:
    """A new database `name` (dropped first if left over), migrated to the current schema."""
    from sqlalchemy import create_engine, text

    from conductor.config.settings import Settings
    from conductor.runtime import Runtime

    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = admin_url.rsplit("/", 1)[0] + f"/{name}"
    runtime = Runtime(Settings(home=Path(tempfile.mkdtemp()), database_url=url, broker_url="memory://"))
    runtime.migrate()
    runtime.close()
    return url


def drop_database(admin_url: str, name: str) -> None:
    from sqlalchemy import create_engine, text

    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def libpq(url: str) -> str:
    """postgresql+psycopg://user@host:port/db as a libpq URI for pgbench."""
    return re.sub(r"^postgresql\+\w+://", "postgresql://", url)


def run_pgbench(binary: str, url: str, clients: int, seconds: int) -> dict[str, float]:
    cmd = [binary, "-n", "-M", "prepared", "-f", str(SCRIPT), "-c", str(clients), "-j", str(min(clients, 2))]
    cmd += ["-T", str(seconds), libpq(url)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    tps = float(re.search(r"tps = ([\d.]+) \(without initial connection time\)", out).group(1))  # type: ignore[union-attr]
    latency = float(re.search(r"latency average = ([\d.]+) ms", out).group(1))  # type: ignore[union-attr]
    failed = re.search(r"number of failed transactions: (\d+)", out)
    return {"clients": clients, "jobs_s": tps, "latency_ms": latency, "failed": int(failed.group(1)) if failed else 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--clients", default="1,4,8,16", help="Comma-separated pgbench client counts.")
    ap.add_argument("--seconds", type=int, default=10, help="Duration of each pgbench run.")
    ap.add_argument("--pg", default="postgresql+psycopg://root@127.0.0.1:5432/postgres", help="An admin URL.")
    ap.add_argument("--database", default="conductor_pgbench", help="The scratch database (dropped afterwards).")
    args = ap.parse_args()
    binary = pgbench_binary()
    url = scratch_database(args.pg, args.database)
    try:
        print(f"{binary}, script {SCRIPT.name}: {STATEMENTS} statements, {COMMITS} commits per job")
        print("| clients | jobs/s | statements/s | commits/s | latency per job (ms) | failed |")
        print("|---:|---:|---:|---:|---:|---:|")
        for clients in [int(c) for c in args.clients.split(",")]:
            r = run_pgbench(binary, url, clients, args.seconds)
            print(
                f"| {clients} | {r['jobs_s']:.0f} | {r['jobs_s'] * STATEMENTS:.0f} | {r['jobs_s'] * COMMITS:.0f} "
                f"| {r['latency_ms']:.1f} | {r['failed']:.0f} |",
                flush=True,
            )
    finally:
        drop_database(args.pg, args.database)


if __name__ == "__main__":
    main()
