"""API load: N concurrent clients (the official `openai` client, async) against `conductor api`.

The scripted model server answers every call after a fixed latency, so what is measured is the
system's own cost: requests/s, p50/p95/p99 of each chat completion's latency minus the bare model
latency on its critical path (model calls x the latency of the same call made straight to the
model server), and errors (must be 0). Then the memory (RSS) of the API process while a
100,000-line batch file is uploaded and read into jobs that the feeder admits progressively.

    nice -n 19 python benchmarks/api_load.py --clients 16 --requests 8 --latency 0.1 --batch-lines 100000
    nice -n 19 python benchmarks/api_load.py --services   # Redis + PostgreSQL + 2 worker processes

Without --services the API runs the embedded default (SQLite, in-process worker: the RSS then
includes the worker); with --services the API process only serves HTTP and feeds the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai

from conductor.app.tenants import create_key
from conductor.config.settings import Settings
from conductor.runtime import Runtime
from tests.support.api_deployment import free_port, wait_http
from tests.support.cluster import Proc, cluster_env, workers, write_pool
from tests.support.databases import fresh_pg_database
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import conductor_reply

REDIS = "redis://127.0.0.1:6379/15"


def fixed_latency(latency: float):  # type: ignore[no-untyped-def]
    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor"):
            return dataclasses.replace(conductor_reply(messages), delay_s=latency)
        return Reply(f"{model.rsplit('-', 1)[-1]} answered", delay_s=latency)

    return script


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclasses.dataclass
class Target:
    base_url: str
    key: str
    api: Proc
    model_url: str


@contextlib.contextmanager
def deployment(home: Path, server: ScriptedLLMServer, *, services: bool, threads: int) -> Iterator[Target]:
    pool = scripted_pool(server.base_url)
    pool_file = write_pool(pool, home / "pool.yaml")
    port = free_port()
    with contextlib.ExitStack() as stack:
        if services:
            db = stack.enter_context(fresh_pg_database())
            broker = REDIS
            _flush(broker)
        else:
            db, broker = f"sqlite:///{home / 'conductor.db'}", "memory://"
        env = cluster_env(
            home,
            broker,
            db,
            pool_file,
            recursion="false",
            embedded_concurrency=str(threads),
            max_in_flight_jobs="64",
        )
        rt = Runtime(Settings(home=home, broker_url=broker, database_url=db), pool=pool)
        rt.migrate()
        key, _ = create_key(rt.sessions, "load")
        rt.close()
        if services:
            # beat sweeps the Batch API batches (expire, finalize): the API process holds no work
            stack.enter_context(workers(env, home, ["w1", "w2"], concurrency=threads // 2 or 1, beat=True))
        api = Proc("api", ["api", "--port", str(port)], env, home / "api.log")
        stack.callback(api.stop)
        wait_http(f"http://127.0.0.1:{port}/openapi.json", api)
        yield Target(f"http://127.0.0.1:{port}/v1", key, api, server.base_url)
        if services:
            _flush(broker)


def _flush(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def bare_latency(model_url: str, clients: int, each: int) -> list[float]:
    """The same chat call made straight to the model server, at the same concurrency."""
    client = openai.AsyncOpenAI(base_url=model_url, api_key="x", max_retries=0)
    out: list[float] = []

    async def one() -> None:
        for _ in range(each):
            t = time.perf_counter()
            await client.chat.completions.create(model="scripted-w0", messages=[{"role": "user", "content": "hi"}])
            out.append(time.perf_counter() - t)

    await asyncio.gather(*(one() for _ in range(clients)))
    await client.close()
    return out


async def load(target: Target, clients: int, each: int) -> dict[str, Any]:
    client = openai.AsyncOpenAI(base_url=target.base_url, api_key=target.key, max_retries=0, timeout=300)
    latencies: list[tuple[float, int]] = []
    errors: list[str] = []

    async def one(c: int) -> None:
        for i in range(each):
            t = time.perf_counter()
            try:
                r = await client.chat.completions.create(
                    model="conductor", messages=[{"role": "user", "content": f"[wf:single] client {c} request {i}"}]
                )
                latencies.append((time.perf_counter() - t, int((r.model_extra or {})["conductor"]["model_calls"])))
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:200])

    started = time.perf_counter()
    await asyncio.gather(*(one(c) for c in range(clients)))
    wall = time.perf_counter() - started
    await client.close()
    return {"wall": wall, "latencies": latencies, "errors": errors}


def batch_file(path: Path, lines: int) -> Path:
    with path.open("w") as fh:
        for i in range(lines):
            body = {"model": "conductor", "messages": [{"role": "user", "content": f"[wf:single] item {i}"}]}
            fh.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}))
            fh.write("\n")
    return path


def upload_and_admit(target: Target, path: Path, timeout: float) -> dict[str, Any]:
    """Peak RSS of the API process from before the upload until the batch's every line is a job."""
    pid = target.api.popen.pid
    samples: list[float] = [rss_mb(pid)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            samples.append(rss_mb(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    client = openai.OpenAI(base_url=target.base_url, api_key=target.key, max_retries=0, timeout=600)
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        f = client.files.create(file=fh, purpose="batch")
    uploaded = time.perf_counter() - t0
    batch = client.batches.create(input_file_id=f.id, endpoint="/v1/chat/completions", completion_window="24h")
    deadline = time.monotonic() + timeout
    while batch.status == "validating" and time.monotonic() < deadline:
        time.sleep(0.5)
        batch = client.batches.retrieve(batch.id)
    ingested = time.perf_counter() - t0
    time.sleep(2.0)  # a few admission passes with the whole batch waiting
    stop.set()
    sampler.join()
    counts = batch.request_counts
    return {
        "status": batch.status,
        "total": counts.total if counts else None,
        "bytes": f.bytes,
        "upload_s": round(uploaded, 2),
        "ingest_s": round(ingested, 2),
        "rss_before_mb": round(samples[0], 1),
        "rss_peak_mb": round(max(samples), 1),
        "rss_end_mb": round(samples[-1], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=8, help="sequential requests per client")
    ap.add_argument("--latency", type=float, default=0.1, help="fixed seconds per model call")
    ap.add_argument("--threads", type=int, default=16, help="worker threads (embedded) or in total (services)")
    ap.add_argument("--batch-lines", type=int, default=100_000)
    ap.add_argument("--services", action="store_true", help="Redis + PostgreSQL + 2 worker processes")
    args = ap.parse_args()

    server = ScriptedLLMServer(fixed_latency(args.latency)).start()
    home = Path(tempfile.mkdtemp(prefix="api_load_"))
    try:
        with deployment(home, server, services=args.services, threads=args.threads) as target:
            bare = asyncio.run(bare_latency(server.base_url, args.clients, 4))
            bare_p50 = statistics.median(bare)
            asyncio.run(load(target, 2, 1))  # warm-up
            result = asyncio.run(load(target, args.clients, args.requests))
            over = [lat - calls * bare_p50 for lat, calls in result["latencies"]]
            n = len(result["latencies"])
            report: dict[str, Any] = {
                "mode": "services (Redis + PostgreSQL, 2 workers)" if args.services else "embedded (SQLite)",
                "clients": args.clients,
                "requests": n + len(result["errors"]),
                "errors": len(result["errors"]),
                "requests_per_s": round(n / result["wall"], 2),
                "model_latency_s": args.latency,
                "bare_call_p50_s": round(bare_p50, 4),
                "model_calls_per_request": sorted({c for _, c in result["latencies"]}),
                "latency_s": {q: round(pct([lat for lat, _ in result["latencies"]], v), 3) for q, v in _Q},
                "overhead_over_model_s": {q: round(pct(over, v), 3) for q, v in _Q},
            }
            if result["errors"]:
                report["first_errors"] = result["errors"][:3]
            print(json.dumps(report, indent=2), flush=True)
            if args.batch_lines:
                path = batch_file(home / "batch.jsonl", args.batch_lines)
                print(json.dumps({"batch_lines": args.batch_lines, **upload_and_admit(target, path, 1800)}, indent=2))
    finally:
        server.stop()


_Q = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))

if __name__ == "__main__":
    main()
