"""Batch scale: N problems through the system on Redis + PostgreSQL, and what it costs as N grows.

Each size runs on private services (a Redis on its own port, a throwaway PostgreSQL cluster with
fsync off), so Redis memory is this batch's alone. The scripted server (its own process) answers at
once; every problem runs the same fixed workflow (default: one worker step, no Conductor call:
solve, run_step, finalize). The submitting process is a child, as `conductor run` would be: it
streams the file in (`Service.submit_batch`, chunked inserts, jobs admitted by the feeder under its
in-flight and queue-depth bounds), follows the batch (`wait_batch`), then exports the result lines
and the traces by streaming. Printed per size: submit time, time to finish and jobs/s, export
times, peak RSS of the submitter and of each worker, and Redis memory, queue depth and progress
over time.

    python benchmarks/batch_scale.py --problems 10000
    python benchmarks/batch_scale.py --problems 1000,10000,100000 --procs 2 --threads 8
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from benchmarks.orchestration_overhead import FIXED as WORKFLOWS  # single, fanout, chain4
from benchmarks.orchestration_overhead import scripted_server


# -- the submitting process (a child: its peak RSS is its own) ----------------------------------
def submit_and_follow(spec: dict[str, Any]) -> dict[str, Any]:
    """What `conductor run` does, timed: submit the file, follow the batch, export results and traces."""
    from conductor.app.service import JobSpec
    from conductor.config.settings import Settings
    from conductor.system import running_system

    settings = Settings(home=Path(spec["home"]), broker_url=spec["broker"], database_url=spec["db"])
    system = contextlib.ExitStack()
    service = system.enter_context(running_system(settings, worker=False)).service
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    job_spec = JobSpec(options={"workflow": WORKFLOWS[spec["workflow"]]})
    report = service.submit_batch(spec["file"], job_spec, keep_ids=False)
    out["submit_s"] = time.perf_counter() - t0
    out["batch_id"] = report.batch_id
    out["rss_after_submit_mb"] = _maxrss_mb()
    service.wait_batch(report.batch_id, poll_s=1.0)
    out["finish_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    results = Path(spec["home"]) / "results.jsonl"
    out["result_lines"] = 0
    with results.open("w") as fh:
        for line in service.batch_result_lines(report.batch_id):
            fh.write(json.dumps(line) + "\n")
            out["result_lines"] += 1
    out["export_results_s"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    out["trace_rounds"] = service.export_traces(Path(spec["home"]) / "traces.jsonl")
    out["export_traces_s"] = time.perf_counter() - t2
    out["usage"] = service.usage(batch_id=report.batch_id)["by_status"]
    out["peak_rss_mb"] = _maxrss_mb()
    system.close()
    return out


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


# -- the driver -----------------------------------------------------------------------------------
@dataclass
class Sample:
    t: float
    done: int
    redis_mb: float
    queue_depth: int
    unacked: int
    worker_rss_mb: list[float]


@dataclass
class SizeResult:
    problems: int
    submitter: dict[str, Any] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    worker_peak_mb: list[float] = field(default_factory=list)
    worker_cpu_s: float = 0.0


def _write_problems(path: Path, n: int) -> None:
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"id": f"p{i}", "question": f"problem {i}: what is {i} + 1?"}) + "\n")


def run_size(n: int, args: argparse.Namespace) -> SizeResult:
    import psutil
    import redis
    from sqlalchemy import func, select

    from conductor.config.settings import Settings
    from conductor.domain.states import TERMINAL_JOB
    from conductor.runtime import Runtime
    from conductor.store.models import Job
    from schedulers.broker import redis_queue_depth
    from tasks.names import QUEUES
    from tests.support.chaos import PrivatePostgres, PrivateRedis
    from tests.support.cluster import cluster_env, workers, write_pool
    from tests.support.pools import scripted_pool

    res = SizeResult(n)
    home = Path(tempfile.mkdtemp(prefix=f"batch-scale-{n}-"))
    problems = home / "problems.jsonl"
    _write_problems(problems, n)
    redis_srv, pg = PrivateRedis(), PrivatePostgres()
    redis_srv.start()
    pg.init()
    try:
        with scripted_server(0.0) as served:
            pool = scripted_pool(served.url, timeout_s=60)
            env = cluster_env(home, redis_srv.url, pg.url, write_pool(pool, home / "pool.yaml"))
            runtime = Runtime(Settings(home=home, broker_url=redis_srv.url, database_url=pg.url), pool=pool)
            runtime.migrate()
            names = [f"s{i}" for i in range(args.procs)]
            with workers(env, home, names, concurrency=args.threads) as running:
                ps = [psutil.Process(p.popen.pid) for p in running.values()]
                peaks = [0.0] * len(ps)
                cpu0 = sum(p.cpu_times().user + p.cpu_times().system for p in ps)
                rds = redis.Redis.from_url(redis_srv.url)
                depth = redis_queue_depth(redis_srv.url, QUEUES)
                stop = threading.Event()
                t0 = time.perf_counter()

                def sample() -> None:
                    while True:
                        rss = [p.memory_info().rss / 2**20 for p in ps]
                        for i, r in enumerate(rss):
                            peaks[i] = max(peaks[i], r)
                        with runtime.sessions() as s:
                            done = s.scalar(select(func.count()).where(Job.status.in_(TERMINAL_JOB))) or 0
                        res.samples.append(
                            Sample(
                                time.perf_counter() - t0,
                                int(done),
                                int(rds.info("memory")["used_memory"]) / 2**20,
                                depth(),
                                int(rds.hlen("unacked")),
                                rss,
                            )
                        )
                        if stop.wait(args.sample_s):
                            return

                sampler = threading.Thread(target=sample, daemon=True)
                sampler.start()
                spec = {"home": str(home), "broker": redis_srv.url, "db": pg.url, "file": str(problems)}
                spec["workflow"] = args.workflow
                child = subprocess.run(
                    [sys.executable, __file__, "--_submit", json.dumps(spec)],
                    env={**env, "CONDUCTOR_POOL_FILE": str(home / "pool.yaml")},
                    cwd=REPO,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                stop.set()
                sampler.join(30)
                res.worker_cpu_s = sum(p.cpu_times().user + p.cpu_times().system for p in ps) - cpu0
                res.worker_peak_mb = peaks
                if child.returncode != 0:
                    raise RuntimeError(f"submitter failed:\n{child.stderr[-4000:]}")
                res.submitter = json.loads(child.stdout.strip().splitlines()[-1])
            runtime.close()
    finally:
        redis_srv.stop()
        pg.destroy()
    return res


def report(res: SizeResult, rows: int = 16) -> None:
    s = res.submitter
    run_s = s["finish_s"]
    print(f"\n### {res.problems:,} problems\n")
    print("| measure | value |")
    print("|---|---:|")
    print(f"| submit (stream + chunked insert + first admissions) | {s['submit_s']:.1f} s |")
    print(f"| submit -> every job finished | {run_s:.1f} s |")
    print(f"| jobs/s (over submit -> finished) | {res.problems / run_s:.1f} |")
    print(f"| worker CPU s per job | {res.worker_cpu_s / res.problems * 1000:.1f} ms |")
    print(f"| export result lines ({s['result_lines']:,}) | {s['export_results_s']:.1f} s |")
    print(f"| export traces ({s['trace_rounds']:,} Conductor rounds) | {s['export_traces_s']:.1f} s |")
    print(f"| submitter peak RSS (after submit) | {s['peak_rss_mb']:.0f} MB ({s['rss_after_submit_mb']:.0f} MB) |")
    print(f"| worker peak RSS | {', '.join(f'{m:.0f}' for m in res.worker_peak_mb)} MB |")
    if res.samples:
        print(f"| Redis used memory peak | {max(x.redis_mb for x in res.samples):.1f} MB |")
        print(f"| broker queue depth peak | {max(x.queue_depth for x in res.samples)} |")
    print(f"| final job states | {s['usage']} |")
    print("\nover time:\n")
    print("| t s | jobs done | Redis MB | queue depth | unacked | worker RSS MB |")
    print("|---:|---:|---:|---:|---:|---|")
    step = max(1, len(res.samples) // rows)
    for x in [*res.samples[::step], *res.samples[-1:]] if res.samples else []:
        rss = ", ".join(f"{m:.0f}" for m in x.worker_rss_mb)
        print(f"| {x.t:.0f} | {x.done:,} | {x.redis_mb:.1f} | {x.queue_depth} | {x.unacked} | {rss} |")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--problems", default="10000", help="Comma-separated batch sizes.")
    ap.add_argument("--procs", type=int, default=2, help="Worker processes.")
    ap.add_argument("--threads", type=int, default=8, help="Threads per worker process.")
    ap.add_argument("--workflow", choices=sorted(WORKFLOWS), default="single")
    ap.add_argument("--sample-s", type=float, default=5.0, help="Seconds between samples of Redis and RSS.")
    ap.add_argument("--_submit", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._submit:
        print(json.dumps(submit_and_follow(json.loads(args._submit))))
        return
    for n in [int(x) for x in args.problems.split(",")]:
        report(run_size(n, args))


if __name__ == "__main__":
    main()
