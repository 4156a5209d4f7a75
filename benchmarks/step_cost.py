"""What one pipeline step costs the machine: CPU ms, SQL statements and transactions per step.

Wall-clock throughput depends on how loaded the machine is; CPU time and statement counts do
not (much), so this is the measure each speed lever is judged by. One process hosts the whole
system (Redis broker, PostgreSQL or SQLite store, a Celery thread pool of `--threads`), the
scripted model server answers at once from its own process, and every job is the issue's
shape: a Conductor plan, two parallel steps and a combine step (4 model calls, no replan).

    python benchmarks/step_cost.py                      # Redis + PostgreSQL, 120 jobs
    python benchmarks/step_cost.py --sqlite --memory    # the embedded default
    python benchmarks/step_cost.py --py-spy out.txt     # + py-spy --gil of this process
    python benchmarks/step_cost.py --workflow single --statements   # another plan shape (docs/capacity.md)

"step" below is one model call's task (the plan or a run_step): 4 per `fanout` job. The process CPU
includes the submitting client, the broker client and the worker threads; the scripted
server runs elsewhere and is not counted.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def steps_per_job(workflow: str) -> int:
    """Model calls (tasks) of one job of a scripted plan shape: the plan, then each of its steps."""
    import json

    from tests.support.workflows import WORKFLOWS

    return 1 + len(json.loads(WORKFLOWS[workflow][1]))


class SqlCounter:
    """Statements and commits on one SQLAlchemy engine, from the moment `start` is called."""

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self.statements = 0
        self.commits = 0
        self.shapes: Counter[str] = Counter()
        self.counting = False
        self._lock = threading.Lock()

        @event.listens_for(engine, "before_cursor_execute")
        def _stmt(_conn: Any, _cursor: Any, statement: str, *_a: Any) -> None:
            if self.counting:
                with self._lock:
                    self.statements += 1
                    self.shapes[" ".join(statement.split()[:4])[:60]] += 1

        @event.listens_for(engine, "commit")
        def _commit(*_a: Any) -> None:
            if self.counting:
                with self._lock:
                    self.commits += 1


def _fresh_postgres(name: str) -> str:
    from sqlalchemy import create_engine, text

    admin = create_engine("postgresql+psycopg://root@127.0.0.1/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return f"postgresql+psycopg://root@127.0.0.1/{name}"


def wait_done(sessions: Any, ids: list[str], poll_s: float = 0.2, timeout: float = 900) -> None:
    """One indexed count per poll, nothing else (no feeder pass: these jobs never wait for admission)."""
    from conductor.store import queries

    deadline = time.monotonic() + timeout
    while True:
        with sessions() as s:
            if queries.count_ended(s, ids) >= len(ids):
                return
        if time.monotonic() > deadline:
            raise TimeoutError("jobs unfinished")
        time.sleep(poll_s)


def run(args: argparse.Namespace) -> dict[str, Any]:
    import redis

    from benchmarks.orchestration_overhead import scripted_server
    from conductor.app.service import JobSpec
    from conductor.config.settings import Settings
    from conductor.domain.problem import Problem
    from conductor.runtime import Runtime
    from conductor.system import service_for
    from tasks.app import create_app
    from tasks.dispatch import Dispatcher
    from tasks.embedded import EmbeddedWorker
    from tests.support.pools import scripted_pool

    home = Path(tempfile.mkdtemp())
    db = None if args.sqlite else _fresh_postgres("conductor_step_cost")
    broker = "memory://" if args.memory else "redis://127.0.0.1:6379/14"
    if not args.memory:
        redis.Redis.from_url(broker).flushdb()
    with scripted_server(0.0) as served:
        pool = scripted_pool(served.url, timeout_s=60)
        settings = Settings(
            home=home,
            broker_url=broker,
            database_url=db,
            recursion=False,
            direct_openai=not args.litellm,
            reaper_interval_s=3600,
        )
        runtime = Runtime(settings, pool=pool)
        app = create_app(settings, runtime)
        runtime.migrate()
        counter = SqlCounter(runtime.db)
        service = service_for(runtime, Dispatcher(app).submit)
        with EmbeddedWorker(app, concurrency=args.threads):
            warm = [service.submit(Problem(question=f"[wf:fanout] w{i}"))[0] for i in range(8)]
            wait_done(runtime.sessions, warm)
            spy = None
            if args.py_spy:
                spy_args = ["record", "-p", str(os.getpid()), "-d", str(args.spy_s), "-f", "raw", "-o", args.py_spy]
                spy = subprocess.Popen(
                    [args.py_spy_bin, *spy_args, "--gil", "--nonblocking"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            counter.counting = True
            cpu0, t0 = time.process_time(), time.perf_counter()
            ids = [
                service.submit(Problem(question=f"[wf:{args.workflow}] q{i}"), JobSpec())[0] for i in range(args.jobs)
            ]
            wait_done(runtime.sessions, ids)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
            counter.counting = False
            if spy is not None:
                spy.wait()
        runtime.close()
    steps = args.jobs * steps_per_job(args.workflow)
    return {
        "jobs": args.jobs,
        "workflow": args.workflow,
        "statements_per_job": counter.statements / args.jobs,
        "commits_per_job": counter.commits / args.jobs,
        "cpu_ms_per_step": cpu / steps * 1000,
        "statements_per_step": counter.statements / steps,
        "commits_per_step": counter.commits / steps,
        "wall_s": wall,
        "shapes": {k: v / args.jobs for k, v in counter.shapes.most_common()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--jobs", type=int, default=120)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--sqlite", action="store_true", help="The embedded SQLite store instead of PostgreSQL.")
    ap.add_argument("--memory", action="store_true", help="The memory:// broker instead of Redis.")
    ap.add_argument("--litellm", action="store_true", help="Every call through litellm (direct_openai off).")
    ap.add_argument("--statements", action="store_true", help="Also list the statements a job runs, by shape.")
    ap.add_argument(
        "--workflow",
        default="fanout",
        help="The scripted plan every job gets (tests/support/workflows.py): single, chain, fanout, wide.",
    )
    ap.add_argument("--py-spy", help="Write py-spy raw samples (--gil) of this process here.")
    ap.add_argument("--py-spy-bin", default="py-spy")
    ap.add_argument("--spy-s", type=int, default=15)
    args = ap.parse_args()
    r = run(args)
    if args.statements:
        for shape, per_job in r["shapes"].items():
            print(f"{per_job:6.2f}/job  {shape}")
    print(
        f"{r['jobs']} jobs of [wf:{r['workflow']}]: {r['statements_per_job']:.2f} statements/job, "
        f"{r['commits_per_job']:.2f} commits/job; "
        f"{r['cpu_ms_per_step']:.2f} CPU ms/step, {r['statements_per_step']:.2f} statements/step, "
        f"{r['commits_per_step']:.2f} commits/step ({r['wall_s']:.1f} s wall, loaded machine: not a speed figure)"
    )


if __name__ == "__main__":
    main()
