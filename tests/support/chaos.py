"""Chaos: a batch on Redis + PostgreSQL with worker processes and beat, while a seeded driver kills
workers, restarts Redis (no persistence) and PostgreSQL, and makes the provider fail for a while.

Private services, never the shared ones: a Redis on its own port and a PostgreSQL cluster in a
temporary folder (initdb, run as the `postgres` user when we are root), so a restart here takes
down nobody else's tests. Used by `benchmarks/chaos.py` (200 problems) and the CI test (40).

At the end, from the store and from an audit trigger on `steps.output`: finished + failed with a
reason = submitted, 0 lost, 0 step outputs written twice, 0 jobs or tasks stuck, re-deliveries.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.chaos_report import ChaosSummary, count_messages, queue_length, tally
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import conductor_reply


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pg_bin() -> Path:
    root = Path("/usr/lib/postgresql")
    versions = sorted(root.iterdir(), key=lambda p: int(p.name)) if root.exists() else []
    if not versions:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql")
    return versions[-1] / "bin"


def services_missing() -> str | None:
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    try:
        _pg_bin()
    except RuntimeError as exc:
        return str(exc)
    return None


class PrivateRedis:
    """redis-server on its own port, nothing kept on disk: a restart loses every queued message."""

    def __init__(self, also_on: str | None = None) -> None:
        self.port = free_port()
        self.also_on = also_on  # a second address to listen on (the multi-host test's bridge)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                *(
                    "redis-server",
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    *([self.also_on] if self.also_on else []),
                ),
                *("--save", "", "--appendonly", "no"),
                # The second address is the test's own bridge, routed nowhere: let its hosts in.
                *(("--protected-mode", "no") if self.also_on else ()),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait_port(self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def restart(self, down_s: float = 1.0) -> None:
        self.stop()
        time.sleep(down_s)
        self.start()


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (trust auth, superuser `root`) on its own port."""

    def __init__(self, also_on: str | None = None) -> None:
        self.port = free_port()
        self.also_on = also_on  # a second address to listen on, open to its /24 (the multi-host test's bridge)
        self.dir = Path(tempfile.mkdtemp(prefix="chaos-pg-"))
        self.data = self.dir / "data"
        self.bin = _pg_bin()
        self._as: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            shutil.chown(self.dir, "postgres", "postgres")
            # runuser lives in /usr/sbin, which a minimal PATH (cron, CI) may leave out.
            runuser = shutil.which("runuser") or shutil.which("runuser", path="/usr/sbin:/sbin") or "runuser"
            self._as = [runuser, "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://root@127.0.0.1:{self.port}/chaos"

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def init(self) -> None:
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "root", "--no-sync")
        if self.also_on:
            net = self.also_on.rsplit(".", 1)[0] + ".0/24"
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {net} trust\n")
        self.start()
        self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "root", "chaos")

    def start(self) -> None:
        listen = ",".join(["127.0.0.1", *([self.also_on] if self.also_on else [])])
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses={listen} -c fsync=off -c max_connections=200"
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start"
        )

    def stop(self, mode: str = "immediate") -> None:
        subprocess.run(
            [*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop"],
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def restart(self, down_s: float = 1.0) -> None:
        self.stop()  # immediate: like a crash, recovery from the WAL on start
        time.sleep(down_s)
        self.start()

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def _wait_port(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class FaultyProvider:
    """The scripted model server, with windows in which every worker call answers 429 (with
    Retry-After), 500, or too late (a timeout). The Conductor keeps answering."""

    def __init__(self, delay_s: float, slow_s: float) -> None:
        self.mode: str | None = None
        self.delay_s = delay_s
        self.slow_s = slow_s
        self.faults: Counter[str] = Counter()
        self.server = ScriptedLLMServer(self._script)

    def _script(self, model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor"):
            return conductor_reply(messages)
        mode = self.mode
        if mode is not None:
            self.faults[mode] += 1
        if mode == "429":
            return Reply(status=429, headers={"Retry-After": "1"}, error="rate limited (chaos)")
        if mode == "500":
            return Reply(status=500, error="internal error (chaos)")
        if mode == "timeout":
            return Reply("too late", delay_s=self.slow_s)
        return Reply(f"{model.rsplit('-', 1)[-1]} did <{messages[-1]['content'][:30]}>", delay_s=self.delay_s)


AUDIT_SQL = """
CREATE TABLE IF NOT EXISTS chaos_output_writes (step_id bigint, at timestamptz DEFAULT now());
CREATE OR REPLACE FUNCTION chaos_audit_output() RETURNS trigger AS $$
BEGIN
  IF NEW.output IS NOT NULL AND NEW.output IS DISTINCT FROM OLD.output THEN
    INSERT INTO chaos_output_writes(step_id) VALUES (NEW.id);
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS chaos_audit ON steps;
CREATE TRIGGER chaos_audit AFTER UPDATE OF output ON steps FOR EACH ROW EXECUTE FUNCTION chaos_audit_output();
"""

KINDS = ["fanout", "chain", "single", "wide"]


def run_chaos(
    work: Path,
    *,
    problems: int = 40,
    seed: int = 1,
    workers: int = 3,
    threads: int = 4,
    events: int = 1,
    window_s: float = 25.0,
    delay_s: float = 0.2,
    timeout_s: float = 300.0,
    log: Any = print,
) -> ChaosSummary:
    """Run the batch under faults; `events` faults of each kind at seeded random times in `window_s`."""

    from conductor.config.settings import Settings
    from conductor.runtime import Runtime
    from conductor.system import service_for
    from tasks.app import create_app
    from tasks.dispatch import Dispatcher
    from tests.support.cluster import Proc, cluster_env, wait_ready, write_pool
    from tests.support.pools import scripted_pool

    rng = random.Random(seed)
    summary = ChaosSummary(submitted=problems)
    provider = FaultyProvider(delay_s, slow_s=4.0)
    provider.server.start()
    redis_srv, pg = PrivateRedis(), PrivatePostgres()
    redis_srv.start()
    pg.init()
    procs: dict[str, Proc] = {}
    runtime: Runtime | None = None
    try:
        pool = scripted_pool(provider.server.base_url, retries=1, timeout_s=2.0, fallback="beta")
        knobs = {
            "recursion": "true",
            "max_rounds": "2",
            "step_lease_s": "12",
            "task_time_limit_s": "10",
            "reaper_interval_s": "1",
            "ready_grace_s": "4",
        }
        env = cluster_env(work, redis_srv.url, pg.url, write_pool(pool, work / "pool.yaml"), **knobs)
        settings = Settings(
            home=work,
            broker_url=redis_srv.url,
            database_url=pg.url,
            **{k: v for k, v in knobs.items()},  # type: ignore[arg-type]
        )
        runtime = Runtime(settings, pool=pool)
        app = create_app(settings, runtime)
        runtime.migrate()
        with runtime.db.begin() as conn:
            conn.exec_driver_sql(AUDIT_SQL)
        service = service_for(runtime, Dispatcher(app).submit)

        lives: Counter[str] = Counter()

        def worker(name: str) -> Proc:
            # Each life of a worker logs to its own file: the broker messages it received are counted
            # from every life, the ones SIGKILL ended included.
            args = ["worker", "-Q", "conductor,llm,default", "-c", str(threads), "-P", "threads"]
            lives[name] += 1
            log_file = work / f"{name}.{lives[name]}.worker.log"
            return Proc(name, [*args, "-n", f"{name}@chaos", "-l", "INFO"], env, log_file)

        names = [f"w{i}" for i in range(workers)]
        for n in names:
            procs[n] = worker(n)
        wait_ready(list(procs.values()))
        procs["beat"] = Proc("beat", ["beat", "-l", "INFO"], env, work / "beat.log")

        src = work / "problems.jsonl"
        with src.open("w") as fh:
            for i in range(problems):
                kind = KINDS[rng.randrange(len(KINDS))]
                fh.write(json.dumps({"id": f"c{i}", "question": f"[wf:{kind}] chaos problem {i}"}) + "\n")

        plan: list[tuple[float, str]] = []
        for kind in ("kill", "redis", "postgres", "429", "500", "timeout"):
            plan += [(rng.uniform(2.0, window_s), kind) for _ in range(events)]
        plan.sort()
        started = time.monotonic()
        report = service.submit_batch(src, keep_ids=False)
        batch_id = report.batch_id

        faults_ended = [float("inf")]  # epoch seconds when the last fault was over

        def drive() -> None:
            for at, kind in plan:
                time.sleep(max(0.0, at - (time.monotonic() - started)))
                t = f"{time.monotonic() - started:.1f}s"
                if kind == "kill":
                    victim = rng.choice(names)
                    procs[victim].kill()
                    procs[victim]._fh.close()
                    time.sleep(rng.uniform(0.5, 2.0))
                    procs[victim] = worker(victim)
                    summary.events.append(f"{t} SIGKILL {victim} (restarted)")
                elif kind == "redis":
                    redis_srv.restart(rng.uniform(0.5, 2.0))
                    summary.events.append(f"{t} Redis restarted (queues lost)")
                elif kind == "postgres":
                    pg.restart(rng.uniform(0.5, 2.0))
                    summary.events.append(f"{t} PostgreSQL restarted")
                else:
                    provider.mode = kind
                    time.sleep(rng.uniform(2.0, 4.0))
                    provider.mode = None
                    summary.events.append(f"{t} provider {kind} window")
                log(summary.events[-1])
            faults_ended[0] = time.time()

        driver = threading.Thread(target=drive, name="chaos-driver", daemon=True)
        driver.start()
        try:
            service.wait_batch(batch_id, timeout=timeout_s, poll_s=0.5)
        except TimeoutError as exc:
            summary.events.append(f"gave up waiting: {exc}")
        driver.join(timeout=window_s + 30)
        summary.seconds = time.monotonic() - started
        time.sleep(1.0)
        with runtime.sessions() as s:
            tally(s, summary, batch_id)
        count_messages(summary, work, faults_ended[0], left_in_queue=queue_length(redis_srv.url, "llm"))
        summary.model_calls = len(provider.server.calls)
        summary.faults = dict(provider.faults)
        return summary
    finally:
        for p in procs.values():
            p.stop()
        if runtime is not None:
            runtime.close()
        provider.server.stop()
        redis_srv.stop()
        pg.destroy()
