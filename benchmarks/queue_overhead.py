"""Queue overhead: the same fixed workflows run by a direct call loop and through the pipeline.

Side by side in one run, against the scripted OpenAI-compatible server (so model time is a
known constant): (1) a plain loop calling the gateway step by step, no queue, no store;
(2) the embedded default (memory:// broker, in-process worker, SQLite); (3) production
shape when Redis and PostgreSQL answer (two worker processes). Prints jobs/s and the ratios.

    python benchmarks/queue_overhead.py --jobs 40 --delay 0.05
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conductor.app.service import JobSpec
from conductor.domain.problem import Problem
from conductor.domain.prompts import build_step_messages
from conductor.domain.workflow import Workflow
from conductor.inference.gateway import Gateway
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.system import embedded_system

WORKFLOW = {"model_id": [0, 1, 0], "subtasks": ["part A", "part B", "combine"], "access_list": [[], [], [0, 1]]}


def direct_loop(pool, n: int) -> float:
    """What a user would write without the system: call each step in order, keep outputs in memory."""
    gw = Gateway(pool, model_home=Path(tempfile.mkdtemp()))
    wf = Workflow.from_lists(**WORKFLOW)
    started = time.perf_counter()
    for _ in range(n):
        outputs: dict[int, str] = {}
        for st in wf.steps:
            context = [(wf.steps[d].subtask, outputs[d]) for d in st.dependencies()]
            outputs[st.index] = gw.call_worker(pool.name_of(st.worker), build_step_messages(st.subtask, context)).text
    return time.perf_counter() - started


def through_pipeline(pool, n: int, **settings) -> float:
    with embedded_system(Path(tempfile.mkdtemp()), pool, recursion=False, **settings) as sysm:
        started = time.perf_counter()
        ids = [
            sysm.service.submit(Problem(question=f"q{i}"), JobSpec(options={"workflow": WORKFLOW}))[0] for i in range(n)
        ]
        sysm.service.wait(ids, timeout=600, poll_s=0.05)
        return time.perf_counter() - started


def through_cluster(pool, n: int) -> float | None:
    import redis
    from sqlalchemy import create_engine, text

    try:
        redis.Redis(host="127.0.0.1", socket_connect_timeout=1).ping()
        admin = create_engine("postgresql+psycopg://root@127.0.0.1/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text('DROP DATABASE IF EXISTS "conductor_bench" WITH (FORCE)'))
            c.execute(text('CREATE DATABASE "conductor_bench"'))
    except Exception as exc:
        print(f"(skipping Redis+PostgreSQL: {exc})")
        return None
    from conductor.app.runtime import Runtime
    from conductor.app.service import Service
    from conductor.config.settings import Settings
    from tasks.app import create_app
    from tasks.dispatch import Dispatcher
    from tests.support.cluster import cluster_env, workers, write_pool

    home = Path(tempfile.mkdtemp())
    broker, db = "redis://127.0.0.1:6379/15", "postgresql+psycopg://root@127.0.0.1/conductor_bench"
    redis.Redis.from_url(broker).flushdb()
    env = cluster_env(home, broker, db, write_pool(pool, home / "pool.yaml"), recursion="false")
    settings = Settings(home=home, broker_url=broker, database_url=db)
    runtime = Runtime(settings, pool=pool)
    service = Service(runtime, Dispatcher(create_app(settings, runtime)))
    runtime.migrate()
    with workers(env, home, ["b1", "b2"], concurrency=8):
        started = time.perf_counter()
        ids = [service.submit(Problem(question=f"q{i}"), JobSpec(options={"workflow": WORKFLOW}))[0] for i in range(n)]
        service.wait(ids, timeout=600, poll_s=0.05)
        return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--delay", type=float, default=0.05, help="Seconds each scripted model call takes.")
    ap.add_argument("--no-cluster", action="store_true")
    args = ap.parse_args()
    server = ScriptedLLMServer(lambda m, msgs, b: Reply("x", delay_s=args.delay)).start()
    pool = scripted_pool(server.base_url)
    try:
        rows = [("direct call loop", direct_loop(pool, args.jobs))]
        rows.append(
            (
                "pipeline, embedded (memory://, SQLite, 8 threads)",
                through_pipeline(pool, args.jobs, embedded_concurrency=8),
            )
        )
        if not args.no_cluster:
            t = through_cluster(pool, args.jobs)
            if t is not None:
                rows.append(("pipeline, Redis + PostgreSQL, 2 workers x 8 threads", t))
    finally:
        server.stop()
    base = rows[0][1]
    calls = args.jobs * 3
    print(f"\n{args.jobs} jobs x 3 steps ({calls} model calls of {args.delay * 1000:.0f} ms each)\n")
    print(f"| {'mode':<52} | {'seconds':>8} | {'jobs/s':>7} | {'speed vs direct':>15} |")
    print(f"|{'-' * 54}|{'-' * 10}|{'-' * 9}|{'-' * 17}|")
    for name, secs in rows:
        print(f"| {name:<52} | {secs:8.2f} | {args.jobs / secs:7.1f} | {base / secs:14.2f}x |")
    serial_model_time = calls * args.delay
    print(
        f"\nmodel time if serial: {serial_model_time:.2f}s; the direct loop's overhead per call: "
        f"{(base - serial_model_time) / calls * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
