"""Orchestration overhead: the system against a concurrent direct asyncio loop, same calls, same concurrency.

One mix of fixed workflows (single step; 3-way fan-out then combine; a 4-step chain; one
Conductor plan + its step + a replan round that keeps the answer) is run by

  (a) a direct asyncio loop: httpx against the same OpenAI-compatible endpoint, the same
      prompts, the same parallel steps, at most C model calls in flight: the physical limit;
  (b) the system: embedded (memory://, SQLite, C threads), and Redis + PostgreSQL with 1, 2
      and 4 worker processes sharing C threads in all,

against the scripted server (its own process) answering after 0, 100 ms, 200 ms or 1 s. Per
mode it prints jobs/s, the ratio to (a), the orchestration overhead per step (idle: one job at a
time, job latency minus the critical path's model time, per critical step), p50/p95 job latency
under the batch, and CPU seconds per task.

    python benchmarks/orchestration_overhead.py                         # 0, 0.2 and 1 s
    python benchmarks/orchestration_overhead.py --latency 0 --jobs 400 --procs 1,2,4
    python benchmarks/orchestration_overhead.py --latency 0 --profile 20  # py-spy of worker 1, 20 s
    python benchmarks/orchestration_overhead.py --latency 0 --litellm   # + every call through litellm

Self-hosted OpenAI-protocol servers are called with the openai client by default
(`direct_openai`); `--litellm` adds, per system mode, a row with every call through litellm.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

FIXED: dict[str, dict[str, Any]] = {
    "single": {"model_id": [0], "subtasks": ["answer it"], "access_list": [[]]},
    "fanout": {
        "model_id": [0, 1, 0, 1],
        "subtasks": ["part A", "part B", "part C", "combine"],
        "access_list": [[], [], [], [0, 1, 2]],
    },
    "chain4": {
        "model_id": [0, 1, 0, 1],
        "subtasks": ["draft", "check", "improve", "final"],
        "access_list": [[], [0], [1], [2]],
    },
}
KINDS = ["single", "fanout", "chain4", "replan"]
#: model calls on each kind's critical path, and in all
CRITICAL = {"single": 1, "fanout": 2, "chain4": 4, "replan": 3}
CALLS = {"single": 1, "fanout": 4, "chain4": 4, "replan": 3}
#: Celery tasks per job: solve + finalize + one per step + one per Conductor round
TASKS = {"single": 3, "fanout": 6, "chain4": 6, "replan": 5}


# -- the scripted provider, in its own process ---------------------------------------------------
def _script(delay: float):
    from tests.support.scripted_llm import Reply
    from tests.support.workflows import conductor_reply

    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor"):
            r = conductor_reply(messages)
            r.delay_s = delay
            return r
        return Reply("x", delay_s=delay)

    return script


def _serve(delay: float, conn: Any) -> None:
    os.nice(0)
    from tests.support.scripted_llm import ScriptedLLMServer

    server = ScriptedLLMServer(_script(delay)).start()
    conn.send(server.base_url)
    conn.recv()
    server.stop()


@contextmanager
def scripted_server(delay: float) -> Iterator[str]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(delay, child), daemon=True)
    proc.start()
    url = parent.recv()
    try:
        yield url
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.kill()


def _kind(i: int) -> str:
    return KINDS[i % len(KINDS)]


@dataclass
class Result:
    mode: str
    jobs: int
    seconds: float
    latencies: list[float]
    kinds: list[str]
    cpu_s: float | None = None
    idle_overhead_ms: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds

    @property
    def tasks(self) -> int:
        return sum(TASKS[k] for k in self.kinds)


# -- (a) the direct asyncio loop ----------------------------------------------------------------
async def _direct(pool: Any, n: int, concurrency: int, *, serial: bool = False) -> tuple[float, list[float], list[str]]:
    import httpx

    from conductor.domain.parser import parse_workflow
    from conductor.domain.prompts import build_plan_messages, build_replan_messages, build_step_messages
    from conductor.domain.workflow import Workflow

    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    cards = pool.cards()
    async with httpx.AsyncClient(base_url=pool.conductor.api_base, limits=limits, timeout=60) as client:

        async def call(spec: Any, messages: list[dict]) -> str:
            body = {"model": spec.model.split("/", 1)[1], "messages": messages, "max_tokens": spec.max_tokens}
            async with sem:
                r = await client.post("/chat/completions", json=body)
            r.raise_for_status()
            return str(r.json()["choices"][0]["message"]["content"])

        async def run_workflow(wf: Workflow) -> str:
            outputs: dict[int, asyncio.Future[str]] = {}

            async def step(st: Any) -> str:
                deps = [await outputs[d] for d in st.dependencies()]
                context = [(wf.steps[d].subtask, out) for d, out in zip(st.dependencies(), deps, strict=True)]
                return await call(pool.workers[st.worker], build_step_messages(st.subtask, context))

            for st in wf.steps:
                outputs[st.index] = asyncio.ensure_future(step(st))
            results = await asyncio.gather(*outputs.values())
            return results[-1]

        async def job(i: int, t0: float) -> float:
            kind = _kind(i)
            if kind in FIXED:
                await run_workflow(Workflow.from_lists(**FIXED[kind]))
            else:
                question = f"[wf:single] q{i}"
                text = await call(pool.conductor, build_plan_messages(question, cards, max_steps=5))
                wf = parse_workflow(text, pool_size=len(cards), max_steps=5)
                answer = await run_workflow(wf)
                text = await call(
                    pool.conductor,
                    build_replan_messages(question, cards, previous=wf, previous_answer=answer, max_steps=5),
                )
                parse_workflow(text, pool_size=len(cards), max_steps=5, allow_empty=True)
            return time.perf_counter() - t0

        started = time.perf_counter()
        if serial:
            lat = []
            for i in range(n):
                lat.append(await job(i, time.perf_counter()))
        else:
            lat = list(await asyncio.gather(*(job(i, started) for i in range(n))))
        return time.perf_counter() - started, lat, [_kind(i) for i in range(n)]


def direct_loop(pool: Any, n: int, concurrency: int, latency: float) -> Result:
    cpu0 = time.process_time()
    secs, lat, kinds = asyncio.run(_direct(pool, n, concurrency))
    res = Result("(a) direct asyncio loop", n, secs, lat, kinds, cpu_s=time.process_time() - cpu0)
    _, idle, idle_kinds = asyncio.run(_direct(pool, len(KINDS) * 2, concurrency, serial=True))
    res.idle_overhead_ms = _overhead_ms(idle, idle_kinds, latency)
    return res


def _overhead_ms(latencies: list[float], kinds: list[str], latency: float) -> float:
    """Median over jobs of (job time minus model time on its critical path) per critical step."""
    per_step = [(t - CRITICAL[k] * latency) / CRITICAL[k] for t, k in zip(latencies, kinds, strict=True)]
    return statistics.median(per_step) * 1000


# -- (b) the system ---------------------------------------------------------------------------
def _problem_and_options(i: int) -> tuple[Any, dict[str, Any]]:
    from conductor.domain.problem import Problem

    kind = _kind(i)
    if kind in FIXED:
        return Problem(question=f"q{i}"), {"workflow": FIXED[kind]}
    return Problem(question=f"[wf:single] q{i}"), {}


def _run_jobs(service: Any, n: int, *, serial: bool = False, offset: int = 0) -> tuple[float, list[float], list[str]]:
    from sqlalchemy import select

    from conductor.app.service import JobSpec
    from conductor.store.models import Job

    started = time.perf_counter()
    ids: list[str] = []
    if serial:
        for i in range(offset, offset + n):
            p, o = _problem_and_options(i)
            ids.append(service.submit(p, JobSpec(options=o))[0])
            service.wait(ids[-1:], timeout=600, poll_s=0.002)
    else:
        for i in range(offset, offset + n):
            p, o = _problem_and_options(i)
            ids.append(service.submit(p, JobSpec(options=o))[0])
        service.wait(ids, timeout=1800, poll_s=0.05)
    secs = time.perf_counter() - started
    with service.sessions() as s:
        rows = {j.id: j for j in s.scalars(select(Job).where(Job.id.in_(ids)))}
        bad = [r.error for r in rows.values() if r.status != "done"]
        if bad:
            raise RuntimeError(f"{len(bad)} jobs did not finish: {bad[:3]}")
        if serial:  # one at a time: the job's own time, from its row to its finish
            lat = [(rows[i].finished_at - rows[i].created_at).total_seconds() for i in ids]
        else:  # under the batch: from the batch's start
            t0 = min(r.created_at for r in rows.values())
            lat = [(rows[i].finished_at - t0).total_seconds() for i in ids]
    return secs, lat, [_kind(i) for i in range(offset, offset + n)]


def embedded(pool: Any, n: int, concurrency: int, latency: float, direct: bool = True) -> Result:
    from tests.support.system import embedded_system

    home = Path(tempfile.mkdtemp())
    with embedded_system(home, pool, concurrency=concurrency, max_rounds=2, direct_openai=direct) as sysm:
        _, idle, idle_kinds = _run_jobs(sysm.service, len(KINDS) * 2, serial=True, offset=10**6)
        cpu0 = time.process_time()
        secs, lat, kinds = _run_jobs(sysm.service, n)
        cpu = time.process_time() - cpu0
    via = "" if direct else ", litellm"
    res = Result(f"(b) embedded: memory://, SQLite, {concurrency} threads{via}", n, secs, lat, kinds, cpu_s=cpu)
    res.idle_overhead_ms = _overhead_ms(idle, idle_kinds, latency)
    return res


def services_available() -> str | None:
    try:
        import redis
        from sqlalchemy import create_engine, text

        redis.Redis(host="127.0.0.1", socket_connect_timeout=1).ping()
        admin = create_engine("postgresql+psycopg://root@127.0.0.1/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(text("SELECT 1"))
        admin.dispose()
    except Exception as exc:
        return str(exc).splitlines()[0]
    return None


def cluster(
    pool: Any, n: int, concurrency: int, procs: int, latency: float, profile: int | None = None, direct: bool = True
) -> Result:
    import psutil
    import redis
    from sqlalchemy import create_engine, text

    from conductor.config.settings import Settings
    from conductor.system import running_system
    from tests.support.cluster import cluster_env, workers, write_pool

    admin = create_engine("postgresql+psycopg://root@127.0.0.1/postgres", isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text('DROP DATABASE IF EXISTS "conductor_bench" WITH (FORCE)'))
        c.execute(text('CREATE DATABASE "conductor_bench"'))
    home = Path(tempfile.mkdtemp())
    broker, db = "redis://127.0.0.1:6379/15", "postgresql+psycopg://root@127.0.0.1/conductor_bench"
    redis.Redis.from_url(broker).flushdb()
    extra = {"max_rounds": "2", "direct_openai": str(direct).lower()}
    env = cluster_env(home, broker, db, write_pool(pool, home / "pool.yaml"), **extra)
    settings = Settings(home=home, broker_url=broker, database_url=db, max_rounds=2, direct_openai=direct)
    system = contextlib.ExitStack()
    service = system.enter_context(running_system(settings, pool=pool, worker=False)).service
    threads = max(1, concurrency // procs)
    names = [f"b{i}" for i in range(procs)]
    try:
        with workers(env, home, names, concurrency=threads) as running:
            ps = [psutil.Process(p.popen.pid) for p in running.values()]

            def cpu() -> float:
                total = 0.0
                for p in ps:
                    for q in [p, *p.children(recursive=True)]:
                        t = q.cpu_times()
                        total += t.user + t.system
                return total

            _, idle, idle_kinds = _run_jobs(service, len(KINDS) * 2, serial=True, offset=10**6)
            spy = _py_spy(ps[0].pid, profile, home) if profile else None
            cpu0 = time.process_time()
            w0 = cpu()
            secs, lat, kinds = _run_jobs(service, n)
            if spy is not None:
                spy.wait()
            workers_cpu = cpu() - w0
            client_cpu = time.process_time() - cpu0
    finally:
        system.close()
        admin.dispose()
    res = Result(
        f"(b) Redis+PostgreSQL, {procs} worker proc x {threads} threads{'' if direct else ', litellm'}",
        n,
        secs,
        lat,
        kinds,
        cpu_s=workers_cpu,
    )
    res.notes["client_cpu_s"] = client_cpu
    res.idle_overhead_ms = _overhead_ms(idle, idle_kinds, latency)
    return res


def _py_spy(pid: int, seconds: int, home: Path) -> Any:
    """Sample one worker with py-spy (pip install py-spy) for `seconds`; writes a flame graph."""
    import subprocess

    out = Path("results") / f"py-spy-worker-{int(time.time())}.txt"
    out.parent.mkdir(exist_ok=True)
    print(f"(py-spy: {out})")
    return subprocess.Popen(
        ["py-spy", "record", "-p", str(pid), "-d", str(seconds), "-f", "raw", "-o", str(out), "--nonblocking", "--gil"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def report(latency: float, concurrency: int, rows: list[Result]) -> None:
    base = rows[0]
    calls = sum(CALLS[k] for k in base.kinds)
    print(
        f"\n### model latency {latency * 1000:.0f} ms, {base.jobs} jobs ({calls} model calls), "
        f"at most {concurrency} calls in flight\n"
    )
    print("| mode | jobs/s | vs (a) | overhead/step ms (idle) | p50 s | p95 s | CPU s/task |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cpu = f"{r.cpu_s / r.tasks * 1000:.1f} ms" if r.cpu_s is not None else "-"
        if r is base and r.cpu_s is not None:
            cpu = f"({r.cpu_s / calls * 1000:.1f} ms/call)"
        print(
            f"| {r.mode} | {r.jobs_per_s:.1f} | {r.jobs_per_s / base.jobs_per_s:.2f}x | "
            f"{r.idle_overhead_ms:.1f} | {_pct(r.latencies, 0.5):.2f} | {_pct(r.latencies, 0.95):.2f} | {cpu} |"
        )
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--latency", default="0,0.2,1", help="Comma-separated model latencies in seconds.")
    ap.add_argument("--jobs", type=int, default=0, help="Jobs per run (default: sized per latency).")
    ap.add_argument("--concurrency", type=int, default=16, help="Model calls in flight (threads in all).")
    ap.add_argument("--procs", default="1,2,4", help="Worker processes to try on Redis + PostgreSQL.")
    ap.add_argument("--no-embedded", action="store_true")
    ap.add_argument("--no-cluster", action="store_true")
    ap.add_argument("--profile", type=int, help="py-spy the first worker process for this many seconds.")
    ap.add_argument("--litellm", action="store_true", help="Also run each system mode with every call via litellm.")
    args = ap.parse_args()
    from tests.support.pools import scripted_pool

    skip = None if args.no_cluster else services_available()
    if skip:
        print(f"(Redis + PostgreSQL modes skipped: {skip})")
    for latency in [float(x) for x in args.latency.split(",")]:
        n = args.jobs or (400 if latency == 0 else 160 if latency < 0.5 else 64)
        with scripted_server(latency) as url:
            pool = scripted_pool(url, timeout_s=60)
            rows = [direct_loop(pool, n, args.concurrency, latency)]
            paths = [True, False] if args.litellm else [True]
            if not args.no_embedded:
                rows += [embedded(pool, n, args.concurrency, latency, direct) for direct in paths]
            if not args.no_cluster and not skip:
                for procs in [int(p) for p in args.procs.split(",")]:
                    rows += [cluster(pool, n, args.concurrency, procs, latency, args.profile, d) for d in paths]
        report(latency, args.concurrency, rows)
        cl = [r for r in rows if "Redis" in r.mode and "litellm" not in r.mode]
        if len(cl) > 1:
            scale = ", ".join(f"{r.mode.split(', ')[1].split(' x')[0]}: {r.jobs_per_s:.1f} jobs/s" for r in cl)
            print(f"\nscaling with worker processes: {scale}")


if __name__ == "__main__":
    main()
