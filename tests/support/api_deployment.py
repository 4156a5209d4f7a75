"""A real `conductor api` process and real worker processes on Redis + PostgreSQL, with the
scripted model server behind the pool: what the official `openai` client talks to in tests."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai

from conductor.app.tenants import create_key
from conductor.config.pool import Pool
from conductor.config.settings import Settings
from conductor.runtime import Runtime
from tests.support.cluster import Proc, cluster_env, workers, write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import Script, ScriptedLLMServer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Deployment:
    base_url: str
    server: ScriptedLLMServer
    runtime: Runtime
    api: Proc
    env: dict[str, str]
    home: Path
    port: int
    workers: dict[str, Proc] = field(default_factory=dict)  #: the worker processes by name, and "beat"

    def start_api(self) -> Proc:
        """A new `conductor api` process on the same port (after `api.kill()`, say)."""
        self.api = Proc("api", ["api", "--port", str(self.port)], self.env, self.home / f"api-{time.time_ns()}.log")
        wait_http(f"http://127.0.0.1:{self.port}/openapi.json", self.api)
        return self.api

    def key(self, tenant: str, **kwargs: object) -> str:
        return create_key(self.runtime.sessions, tenant, **kwargs)[0]  # type: ignore[arg-type]

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=60)


def wait_http(url: str, proc: Proc, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"api exited:\n{proc.tail()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"api not up:\n{proc.tail()}")


@contextmanager
def deploy(
    home: Path,
    pg_url: str,
    redis_url: str,
    script: Script,
    *,
    worker_names: tuple[str, ...] = ("w1", "w2"),
    concurrency: int = 4,
    queues: str = "conductor,llm,default",
    pool: Callable[[str], Pool] = scripted_pool,
    server: ScriptedLLMServer | None = None,
    **settings: str,
) -> Iterator[Deployment]:
    """`settings` become CONDUCTOR_* variables of the API and the workers (e.g. max_in_flight_jobs="16");
    `pool(base_url)` builds the pool over the scripted server (or `server`, when given, already built)."""
    server = (server or ScriptedLLMServer(script)).start()
    pool_spec = pool(server.base_url)
    pool_file = write_pool(pool_spec, home / "pool.yaml")
    port = free_port()
    env = cluster_env(home, redis_url, pg_url, pool_file, **{"recursion": "false", "batch_sweep_s": "0.3", **settings})
    runtime = Runtime(Settings(home=home, broker_url=redis_url, database_url=pg_url), pool=pool_spec)
    runtime.migrate()
    try:
        # Beat sweeps the batches (expire, finalize, lost reads): the API process holds no work.
        with workers(env, home, list(worker_names), queues=queues, concurrency=concurrency, beat=True) as procs:
            api = Proc("api", ["api", "--port", str(port)], env, home / "api.log")
            d = Deployment(f"http://127.0.0.1:{port}/v1", server, runtime, api, env, home, port, procs)
            try:
                wait_http(f"http://127.0.0.1:{port}/openapi.json", api)
                yield d
            finally:
                d.api.stop()
    finally:
        runtime.close()
        server.stop()


@contextmanager
def fresh_deployment(home: Path, script: Script, **settings: str) -> Iterator[Deployment]:
    """`deploy` on a PostgreSQL database and a Redis database of its own (for module-scoped fixtures)."""
    from tests.support.databases import fresh_pg_database, fresh_redis_db

    with fresh_pg_database() as pg, fresh_redis_db() as redis_url, deploy(home, pg, redis_url, script, **settings) as d:
        yield d


def batch_file(n: int, *, workflow: str = "single", prefix: str = "r") -> bytes:
    """A Batch API input file of `n` chat requests that the scripted Conductor answers with `workflow`."""
    lines = (
        json.dumps(
            {
                "custom_id": f"{prefix}{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": "conductor",
                    "messages": [{"role": "user", "content": f"[wf:{workflow}] {prefix} {i}"}],
                },
            }
        )
        for i in range(n)
    )
    return ("\n".join(lines) + "\n").encode()
