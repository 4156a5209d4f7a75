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
    python benchmarks/orchestration_overhead.py --figures               # issue 18's three figures

Self-hosted OpenAI-protocol servers are called over plain httpx by default
(`direct_openai`); `--litellm` adds, per system mode, a row with every call through litellm.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchmarks.overhead_jobs import (  # the jobs and the direct loop; FIXED is batch_scale's too
    CALLS,
    FIXED,
    MIXES,
    Result,
    _kind,
    _overhead_ms,
    direct_loop,
    idle_jobs,
    use_mix,
)
from benchmarks.slot_timeline import CallSpan, Timeline, direct_timeline, draw, gap_table, rows_of, system_timeline


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
    wall = time.time() - time.monotonic()  # the server stamps calls on the monotonic clock; rows on the wall's
    conn.send(server.base_url)
    while conn.recv() != "stop":  # "calls": the calls since the last ask, as wall-clock spans
        conn.send(
            [(c.started + wall, c.ended + wall, c.model.endswith("scripted-conductor")) for c in server.take_calls()]
        )
    server.stop()


@dataclass
class Served:
    """The scripted server's process: its URL, and the calls it answered (for the in-flight figures)."""

    url: str
    conn: Any

    def take_calls(self) -> list[CallSpan]:
        """The calls answered since the last take (and forget them)."""
        self.conn.send("calls")
        return list(self.conn.recv())


@contextmanager
def scripted_server(delay: float) -> Iterator[Served]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_serve, args=(delay, child), daemon=True)
    proc.start()
    url = parent.recv()
    try:
        yield Served(url, parent)
    finally:
        parent.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.kill()


# -- (b) the system ---------------------------------------------------------------------------
def _problem_and_options(i: int) -> tuple[Any, dict[str, Any]]:
    from conductor.domain.problem import Problem

    kind = _kind(i)
    if kind in FIXED:
        return Problem(question=f"q{i}"), {"workflow": FIXED[kind]}
    if kind == "plan-fanout":
        return Problem(question=f"[wf:fanout] q{i}"), {"recursion": False}
    return Problem(question=f"[wf:single] q{i}"), {}


def _run_jobs(
    service: Any, n: int, *, serial: bool = False, offset: int = 0
) -> tuple[float, list[float], list[str], list[str]]:
    from sqlalchemy import select

    from conductor.app.service import JobSpec
    from conductor.store.models import Job

    started = time.perf_counter()
    ids: list[str] = []
    if serial:
        for i in range(offset, offset + n):
            p, o = _problem_and_options(i)
            ids.append(service.submit(p, JobSpec(options=o))[0])
            _wait(service, ids[-1:], timeout=600, poll_s=0.01)
    else:
        for i in range(offset, offset + n):
            p, o = _problem_and_options(i)
            ids.append(service.submit(p, JobSpec(options=o))[0])
        _wait(service, ids, timeout=1800, poll_s=0.05)
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
    return secs, lat, [_kind(i) for i in range(offset, offset + n)], ids


def _wait(service: Any, ids: list[str], *, timeout: float, poll_s: float) -> None:
    """Poll until every job ended: one indexed count a poll and nothing else. (`Service.wait` also runs
    the feeder's admission pass on every poll, for jobs that wait for it; these never do, and at a
    2 ms poll that pass took the CPU the workers were being measured with.) Latencies come from the
    rows' own timestamps, so the poll interval only delays the next submission, never a figure."""
    from conductor.store import queries

    deadline = time.monotonic() + timeout
    while True:
        with service.sessions() as s:
            if queries.count_ended(s, ids) >= len(ids):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs unfinished after {timeout}s")
        time.sleep(poll_s)


def _slots(label: str, served: Served, service: Any, ids: list[str], t0: float, t1: float, slots: int) -> Timeline:
    return system_timeline(label, served.take_calls(), rows_of(service, ids), t0, t1, slots)


def embedded(pool: Any, n: int, concurrency: int, latency: float, served: Served, direct: bool = True) -> Result:
    from tests.support.system import embedded_system

    home = Path(tempfile.mkdtemp())
    via = "" if direct else ", litellm"
    mode = f"(b) embedded: memory://, SQLite, {concurrency} threads{via}"
    with embedded_system(home, pool, concurrency=concurrency, max_rounds=2, direct_openai=direct) as sysm:
        _, idle, idle_kinds, _ = _run_jobs(sysm.service, idle_jobs(), serial=True, offset=10**6)
        served.take_calls()
        cpu0, t0 = time.process_time(), time.time()
        secs, lat, kinds, ids = _run_jobs(sysm.service, n)
        cpu = time.process_time() - cpu0
        slots = _slots("system (embedded)", served, sysm.service, ids, t0, time.time(), concurrency)
    res = Result(mode, n, secs, lat, kinds, cpu_s=cpu)
    res.notes["slots"] = slots
    res.notes["tag"] = "embedded" + ("" if direct else "-litellm")
    res.idle_overhead_ms = _overhead_ms(idle, idle_kinds, latency)
    return res


#: The phases of one plan + 2 parallel steps + combine job, one job at a time, from its rows' stamps.
PHASES = (
    "submit -> plan recorded, less the call (start the job, send plan, broker hop, lease, record)",
    "plan recorded -> parallel steps start (release, send, broker hop, lease)",
    "parallel step: call returns -> completed",
    "last parallel step completed -> combine starts (inline release and lease)",
    "combine: call returns -> completed",
    "combine completed -> job finished (close the job)",
    "model calls on the critical path (the scripted server's round trip)",
)


def idle_timeline(service: Any, ids: list[str]) -> dict[str, float]:
    """Median ms per phase of the plan-fanout jobs in `ids` (run one at a time): where a critical
    step's orchestration time goes. Stamps are the transitions' own (taken before each commit), so a
    commit's cost lands in the phase after it; model call time is each row's measured latency (a
    round's own finished_at is stamped when its workflow ends, so the plan's end is its first steps' ready_at)."""
    import statistics

    from sqlalchemy import select

    from conductor.store.models import Job, Round, Step

    per: dict[str, list[float]] = {p: [] for p in PHASES}
    with service.sessions() as s:
        for job_id in ids:
            job = s.get(Job, job_id)
            rounds = list(s.scalars(select(Round).where(Round.job_id == job_id)))
            steps = sorted(s.scalars(select(Step).where(Step.job_id == job_id)), key=lambda x: x.step_index)
            if job is None or len(rounds) != 1 or len(steps) != 3 or job.finished_at is None:
                continue
            rnd, (a, b, join) = rounds[0], steps
            plan_s = rnd.latency_s or 0.0
            recorded = min(a.ready_at, b.ready_at)  # ready when the plan is recorded (they depend on nothing)
            last = max((a, b), key=lambda x: x.finished_at)
            ms = {
                PHASES[0]: (recorded - job.created_at).total_seconds() - plan_s,
                PHASES[1]: (min(a.started_at, b.started_at) - recorded).total_seconds(),
                PHASES[2]: (last.finished_at - last.started_at).total_seconds() - (last.latency_s or 0.0),
                PHASES[3]: (join.started_at - last.finished_at).total_seconds(),
                PHASES[4]: (join.finished_at - join.started_at).total_seconds() - (join.latency_s or 0.0),
                PHASES[5]: (job.finished_at - join.finished_at).total_seconds(),
                PHASES[6]: plan_s + (last.latency_s or 0.0) + (join.latency_s or 0.0),
            }
            for k, v in ms.items():
                per[k].append(v * 1000)
    return {k: statistics.median(v) for k, v in per.items() if v}


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
    pool: Any,
    n: int,
    concurrency: int,
    procs: int,
    latency: float,
    served: Served,
    profile: int | None = None,
    direct: bool = True,
    tracing: str | None = None,
    variant: tuple[str, dict[str, str]] = ("", {}),
) -> Result:
    """`tracing`: an OTLP/HTTP endpoint the workers export their spans to (None: tracing off);
    `variant`: a name and the workers' settings that differ (CONDUCTOR_* without the prefix)."""
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
    extra = {"max_rounds": "2", "direct_openai": str(direct).lower(), **variant[1]}
    env = cluster_env(home, broker, db, write_pool(pool, home / "pool.yaml"), **extra)
    if tracing:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = tracing
    # The variant's settings too: what the workers read, and the thread count `conductor worker` derives.
    settings = Settings.model_validate(
        {"home": home, "broker_url": broker, "database_url": db, "max_rounds": 2, "direct_openai": direct, **variant[1]}
    )
    system = contextlib.ExitStack()
    service = system.enter_context(running_system(settings, pool=pool, worker=False)).service
    threads = max(1, concurrency // procs)  # each worker's -c: its model calls in flight
    all_threads = settings.worker_threads(threads)
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

            _, idle, idle_kinds, idle_ids = _run_jobs(service, idle_jobs(), serial=True, offset=10**6)
            timeline = idle_timeline(service, idle_ids)
            spy = _py_spy(ps[0].pid, profile, home) if profile else None
            served.take_calls()
            cpu0, t0 = time.process_time(), time.time()
            w0 = cpu()
            secs, lat, kinds, ids = _run_jobs(service, n)
            t1 = time.time()
            if spy is not None:
                spy.wait()
            workers_cpu = cpu() - w0
            client_cpu = time.process_time() - cpu0
            slots = _slots(
                f"system ({procs} procs x {threads} calls, {all_threads} threads)",
                served,
                service,
                ids,
                t0,
                t1,
                concurrency,
            )
    finally:
        system.close()
        admin.dispose()
    res = Result(
        f"(b) Redis+PostgreSQL, {procs} worker proc x {threads} calls ({all_threads} threads)"
        f"{'' if direct else ', litellm'}"
        f"{', tracing on' if tracing else ''}{', ' + variant[0] if variant[0] else ''}",
        n,
        secs,
        lat,
        kinds,
        cpu_s=workers_cpu,
    )
    res.notes["client_cpu_s"] = client_cpu
    res.notes["slots"] = slots
    res.notes["tag"] = f"{procs}-worker-proc" + "".join(
        f"-{part}" for part in ("" if direct else "litellm", "tracing" if tracing else "", variant[0]) if part
    )
    res.notes["timeline"] = timeline
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
    print("| mode | jobs/s | vs (a) | overhead/step ms (idle) | p50 s | p95 s | CPU ms/model call |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        cpu = f"{r.cpu_s / r.calls * 1000:.1f}" if r.cpu_s is not None else "-"
        print(
            f"| {r.mode} | {r.jobs_per_s:.1f} | {r.jobs_per_s / base.jobs_per_s:.2f}x | "
            f"{r.idle_overhead_ms:.1f} | {_pct(r.latencies, 0.5):.2f} | {_pct(r.latencies, 0.95):.2f} | {cpu} |"
        )
    sys.stdout.flush()


def _variant(spec: str) -> tuple[str, dict[str, str]]:
    """`NAME:key=value,key=value` (settings without the CONDUCTOR_ prefix) -> (NAME, settings)."""
    name, _, pairs = spec.partition(":")
    return name, dict(p.split("=", 1) for p in pairs.split(",") if p)


def slot_figures(latency: float, rows: list[Result], folder: Path) -> None:
    """Issue 30's figure: calls in flight over time, the direct loop beside each system mode, and
    where the system's idle slots went; and the same as a table."""
    direct = rows[0].notes["slots"]
    print(f"\nwhere the slots went ({latency * 1000:.0f} ms calls; share of slot-time, slots x run seconds):\n")
    print(gap_table([(r.mode, r.notes["slots"]) for r in rows]))
    for r in rows[1:]:
        path = folder / f"in_flight_{latency * 1000:.0f}ms_{r.notes['tag']}.png"
        title = f"{r.jobs} jobs, {latency * 1000:.0f} ms model calls: {r.mode[4:]} vs the direct loop"
        print(f"(figure: {draw(path, title, direct, r.notes['slots'])})")
    sys.stdout.flush()


def figures(rows_by_latency: dict[float, list[Result]]) -> None:
    """Issue 18's three figures, each beside the direct loop's."""
    print("\n### issue 18's figures (plan + 2 parallel steps + combine; Redis + PostgreSQL)\n")
    print("| figure | system | direct asyncio loop |")
    print("|---|---:|---:|")
    for latency, rows in sorted(rows_by_latency.items()):
        base, system = rows[0], next((r for r in rows if "Redis" in r.mode), None)
        if system is None:
            continue
        print(
            f"| orchestration ms per critical step, one job at a time ({latency * 1000:.0f} ms calls) | "
            f"{system.idle_overhead_ms:.1f} | {base.idle_overhead_ms:.1f} |"
        )
        if latency == 0:
            print(
                f"| jobs/s at zero latency ({system.mode.split(', ', 1)[1]}) | {system.jobs_per_s:.1f} | "
                f"{base.jobs_per_s:.1f} |"
            )
        else:
            print(
                f"| ratio to the direct loop at {latency * 1000:.0f} ms calls, {system.jobs} jobs | "
                f"{system.jobs_per_s / base.jobs_per_s:.2f}x | 1.00x |"
            )
    for latency, rows in sorted(rows_by_latency.items()):
        system = next((r for r in rows if "Redis" in r.mode), None)
        timeline = system.notes.get("timeline") if system is not None else None
        if timeline:
            print(f"\nwhere one job's time goes, one job at a time, {latency * 1000:.0f} ms calls (median ms):\n")
            print("| phase | ms |\n|---|---:|")
            for phase, ms in timeline.items():
                print(f"| {phase} | {ms:.1f} |")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--latency", default="0,0.2,1", help="Comma-separated model latencies in seconds.")
    ap.add_argument("--jobs", type=int, default=0, help="Jobs per run (default: sized per latency).")
    ap.add_argument("--concurrency", type=int, default=16, help="Model calls in flight (threads in all).")
    ap.add_argument("--procs", default="1,2,4", help="Worker processes to try on Redis + PostgreSQL.")
    ap.add_argument("--mix", choices=sorted(MIXES), default="mixed", help="The jobs every mode runs.")
    ap.add_argument(
        "--figures",
        action="store_true",
        help="Issue 18's three figures: --mix plan-fanout --latency 0,0.2 --procs 2 --no-embedded, 16 in flight.",
    )
    ap.add_argument("--no-embedded", action="store_true")
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="Also run Redis+PostgreSQL with these worker settings (CONDUCTOR_* without the prefix), e.g. "
        "nospare:spare_thread_share=0 (repeatable).",
    )
    ap.add_argument(
        "--tracing",
        default="off",
        help="off, on, or off,on: Redis+PostgreSQL workers with OpenTelemetry tracing off and/or on (spans "
        "exported over OTLP/HTTP to a receiver in this process).",
    )
    ap.add_argument(
        "--timeline", default="results/slot_timeline", help="Folder for the calls-in-flight figures (one per mode)."
    )
    ap.add_argument("--no-cluster", action="store_true")
    ap.add_argument("--profile", type=int, help="py-spy the first worker process for this many seconds.")
    ap.add_argument("--litellm", action="store_true", help="Also run each system mode with every call via litellm.")
    args = ap.parse_args()
    if args.figures:
        args.mix, args.latency, args.procs, args.no_embedded, args.concurrency = "plan-fanout", "0,0.2", "2", True, 16
    use_mix(args.mix)
    from tests.support.pools import scripted_pool

    skip = None if args.no_cluster else services_available()
    receiver = None
    if "on" in args.tracing.split(","):
        from tests.support.otlp_receiver import OtlpReceiver

        receiver = OtlpReceiver().start()  # a real OTLP/HTTP endpoint: the exporters do all their work
    variants = [("", {})] + [_variant(v) for v in args.variant]
    tracing = [receiver.endpoint if mode == "on" and receiver else None for mode in args.tracing.split(",")]
    if skip:
        print(f"(Redis + PostgreSQL modes skipped: {skip})")
    by_latency: dict[float, list[Result]] = {}
    for latency in [float(x) for x in args.latency.split(",")]:
        n = args.jobs or (400 if latency == 0 else 160 if latency < 0.5 else 64)
        with scripted_server(latency) as served:
            pool = scripted_pool(served.url, timeout_s=60)
            served.take_calls()
            rows = [direct_loop(pool, n, args.concurrency, latency)]
            t0 = rows[0].notes["started_wall"]
            # The loop's own batch, not the one-at-a-time jobs it runs after it for the idle overhead.
            batch = [c for c in served.take_calls() if c[0] <= t0 + rows[0].seconds]
            rows[0].notes["slots"] = direct_timeline(batch, t0, t0 + rows[0].seconds, args.concurrency)
            paths = [True, False] if args.litellm else [True]
            if not args.no_embedded:
                rows += [embedded(pool, n, args.concurrency, latency, served, direct) for direct in paths]
            if not args.no_cluster and not skip:
                for procs in [int(p) for p in args.procs.split(",")]:
                    rows += [
                        cluster(pool, n, args.concurrency, procs, latency, served, args.profile, d, endpoint, variant)
                        for d in paths
                        for endpoint in tracing
                        for variant in variants
                    ]
        report(latency, args.concurrency, rows)
        slot_figures(latency, rows, Path(args.timeline))
        by_latency[latency] = rows
        cl = [r for r in rows if "Redis" in r.mode and "litellm" not in r.mode]
        if len(cl) > 1:
            scale = ", ".join(f"{r.mode.split(', ')[1].split(' x')[0]}: {r.jobs_per_s:.1f} jobs/s" for r in cl)
            print(f"\nscaling with worker processes: {scale}")
    if args.figures:
        figures(by_latency)


if __name__ == "__main__":
    main()
