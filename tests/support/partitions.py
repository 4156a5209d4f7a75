"""Hosts that lose each other: two worker hosts (network namespaces, `tests.support.hosts`) run
`conductor worker` for every queue, beat on the first, against a private Redis and PostgreSQL and the
scripted model server on the infra side of a bridge. While a batch flows (the feeder keeps a fixed
number of jobs in flight, so throughput is steady), a seeded driver, at evenly spaced points of the
batch's progress: cuts a host from Redis, cuts a host from PostgreSQL (silent DROPs, each longer
than the step lease), kills a whole host (every process, SIGKILL) and brings it back; then heals.

At the end: every job done or failed with a reason, 0 lost, 0 step outputs written twice (the
chaos audit trigger), 0 stuck, and each faulted host finished steps again after its heal. Per fault:
how long until that host finished a step again, and until the cluster's throughput recovered
(`tests.support.partition_report`). Used by `benchmarks/partitions.py` and the CI test.
"""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.api_partition import API_FAULTS, API_HOST, ApiClient, ApiPartitions, boot_api
from tests.support.chaos import AUDIT_SQL, KINDS, PrivatePostgres, PrivateRedis
from tests.support.chaos_report import count_messages, queue_length, tally
from tests.support.hosts import Hosts
from tests.support.partition_report import Fault, PartitionSummary, measure, received
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import conductor_reply

FINISH_AUDIT_SQL = """
CREATE TABLE IF NOT EXISTS partition_finishes (step_id bigint, holder text, at timestamptz DEFAULT clock_timestamp());
CREATE OR REPLACE FUNCTION partition_audit_finish() RETURNS trigger AS $$
BEGIN
  IF NEW.finished_at IS NOT NULL AND OLD.finished_at IS NULL THEN
    INSERT INTO partition_finishes(step_id, holder) VALUES (NEW.id, NEW.lease_holder);
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS partition_audit ON steps;
CREATE TRIGGER partition_audit AFTER UPDATE OF finished_at ON steps FOR EACH ROW EXECUTE FUNCTION partition_audit_finish();
"""

#: Short limits so a CI run sees every fault and its recovery in a few minutes; the step lease is
#: shorter than each partition, so the reaper re-runs what the cut host held.
QUICK = {
    "recursion": "true",
    "max_rounds": "2",
    "step_lease_s": "12",
    "task_time_limit_s": "10",
    "reaper_interval_s": "1",
    "ready_grace_s": "4",
}
#: Connection limits for CI (the shipped defaults find a dead link in ~25-30 s, these in ~5 s).
FAST_LINKS = {
    "connect_timeout_s": "3",
    "redis_socket_timeout_s": "5",
    "redis_health_check_s": "3",
    "tcp_keepalive_idle_s": "2",
    "tcp_keepalive_interval_s": "1",
    "tcp_keepalive_count": "3",
    "tcp_user_timeout_s": "5",
    "pg_idle_in_transaction_timeout_s": "5",
}
HOSTS = ["h1", "h2"]
API_PORT = 8100  #: where `conductor api` listens on its own host
QUEUES = "conductor,llm,reward,default"


def _script(delay_s: float) -> Any:
    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor"):
            return conductor_reply(messages)
        return Reply(f"{model.rsplit('-', 1)[-1]} did <{messages[-1]['content'][:30]}>", delay_s=delay_s)

    return script


def _problems_file(src: Path, problems: int, rng: random.Random) -> Path:
    with src.open("w") as fh:
        for i in range(problems):
            kind = KINDS[rng.randrange(len(KINDS))]
            fh.write(json.dumps({"id": f"p{i}", "question": f"[wf:{kind}] partition problem {i}"}) + "\n")
    return src


def _plan(rng: random.Random, faults: int) -> tuple[list[Fault], list[str]]:
    """The first `faults` of the six in a seeded order: the worker hosts' (run one after another as
    the batch progresses), and the API host's (`API_FAULTS`, run beside them)."""
    chosen: list[Fault | str] = [
        Fault("redis", rng.choice(HOSTS)),
        Fault("postgres", rng.choice(HOSTS)),
        Fault("kill", rng.choice(HOSTS)),
        *API_FAULTS,
    ]
    rng.shuffle(chosen)
    chosen = chosen[:faults]
    return [f for f in chosen if isinstance(f, Fault)], [f for f in chosen if isinstance(f, str)]


def _kill_and_restart(hosts: Hosts, host: str, procs: dict[str, list[Any]], boot: Any, down_s: float) -> str:
    """The whole host goes (every process SIGKILLed at once), and comes back `down_s` later."""
    n = hosts.kill(host)
    for p in procs[host]:
        p.popen.wait(10)
        p.stop()
    time.sleep(down_s)
    procs[host] = boot(host)
    return f"killed {n} processes, restarted after {down_s:.0f} s"


class BeatSupervisor:
    """Restarts an exited beat, as `restart: unless-stopped` does in docker-compose.yml: after its
    host is killed, the new beat exits while the dead one's lock lives out its TTL. `procs` is the
    beat host's processes, beat last; change it only under `guard`."""

    def __init__(self, procs: list[Any], log_file: Any) -> None:
        self.procs, self.log_file = procs, log_file
        self.guard, self.restarts = threading.Lock(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="beat-supervisor", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(2.0):
            with self.guard:
                beat = self.procs[-1]
                if beat.popen.poll() is None:
                    continue
                beat.stop()
                self.restarts += 1
                self.procs[-1] = beat.again(self.log_file(self.restarts))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        return self.restarts


def run_partitions(
    work: Path,
    *,
    problems: int = 60,
    seed: int = 1,
    threads: int = 4,
    in_flight: int = 6,
    faults: int = 6,
    partition_s: float = 15.0,
    down_s: float = 5.0,
    settle_s: float = 8.0,
    delay_s: float = 2.0,
    links: dict[str, str] | None = None,
    timeout_s: float = 600.0,
    log: Any = print,
) -> PartitionSummary:
    from sqlalchemy import text

    from conductor.app.tenants import create_key
    from conductor.config.settings import Settings
    from conductor.runtime import Runtime
    from conductor.system import service_for
    from tasks.app import create_app
    from tasks.dispatch import Dispatcher
    from tests.support.cluster import Proc, cluster_env, wait_ready, write_pool
    from tests.support.pools import scripted_pool

    rng = random.Random(seed)
    links = FAST_LINKS if links is None else links
    summary = PartitionSummary(submitted=problems, links=dict(links))
    procs: dict[str, list[Proc]] = {h: [] for h in [*HOSTS, API_HOST]}
    runtime: Runtime | None = None
    with Hosts([*HOSTS, API_HOST], seed=seed) as hosts:
        provider = ScriptedLLMServer(_script(delay_s), host=hosts.infra).start()
        redis_srv, pg = PrivateRedis(also_on=hosts.infra), PrivatePostgres(also_on=hosts.infra)
        redis_srv.start()
        pg.init()
        try:
            pool = scripted_pool(provider.base_url, retries=1, timeout_s=delay_s + 3, fallback="beta")
            knobs = {**QUICK, **links, "max_in_flight_jobs": str(in_flight)}
            remote_redis = redis_srv.url.replace("127.0.0.1", hosts.infra)
            remote_pg = pg.url.replace("127.0.0.1", hosts.infra)
            env = cluster_env(work, remote_redis, remote_pg, write_pool(pool, work / "pool.yaml"), **knobs)
            settings = Settings(home=work, broker_url=redis_srv.url, database_url=pg.url, **knobs)  # type: ignore[arg-type]
            runtime = Runtime(settings, pool=pool)
            app = create_app(settings, runtime)
            runtime.migrate()
            with runtime.db.begin() as conn:
                conn.exec_driver_sql(AUDIT_SQL)
                conn.exec_driver_sql(FINISH_AUDIT_SQL)
            service = service_for(runtime, Dispatcher(app).submit)
            lives = {h: 0 for h in HOSTS}

            def boot(host: str) -> list[Proc]:
                """The host's processes, each life logging to its own file (counted by chaos_report)."""
                lives[host] += 1
                name = f"{host}.{lives[host]}"
                args = ["worker", "-Q", QUEUES, "-c", str(threads), "-P", "threads", "-n", f"{host}@part", "-l", "INFO"]
                prefix = hosts.exec_prefix(host)
                started = [Proc(host, args, env, work / f"{name}.worker.log", prefix=prefix)]
                wait_ready(started)
                if host == HOSTS[0]:
                    started.append(
                        Proc(f"{host}-beat", ["beat", "-l", "INFO"], env, work / f"{name}.beat.log", prefix=prefix)
                    )
                return started

            for h in HOSTS:
                procs[h] = boot(h)
            supervisor = BeatSupervisor(procs[HOSTS[0]], lambda n: work / f"{HOSTS[0]}.{lives[HOSTS[0]]}.beat.{n}.log")
            guard = supervisor.guard

            src = _problems_file(work / "problems.jsonl", problems, rng)
            plan, api_plan = _plan(rng, faults)
            key, tenant_id = create_key(runtime.sessions, "partitions")
            client = ApiClient(f"http://{hosts.address(API_HOST)}:{API_PORT}", key)
            api = ApiPartitions(hosts, {"api": API_PORT, "redis": redis_srv.port, "postgres": pg.port}, client, log)
            if api_plan:
                procs[API_HOST] = [boot_api(hosts, env, work, API_PORT)]
            started, wall_start = time.monotonic(), time.time()
            batch_id = service.submit_batch(src, keep_ids=False).batch_id

            api_thread = api.start(api_plan, settle_s, partition_s, summary.events, wall_start)

            def progress() -> int:
                done, _total = service.batch_progress(batch_id)
                return done

            deadline = started + timeout_s
            last_heal = time.time()
            for k, fault in enumerate(plan):
                # Early in the batch: each fault's recovery needs work left to show in.
                threshold = problems * 0.15 * (k + 1)
                while (progress() < threshold or time.time() - last_heal < settle_s) and time.monotonic() < deadline:
                    service.admit()
                    time.sleep(0.5)
                fault.started = time.time()
                if fault.kind == "kill":
                    with guard:
                        note = _kill_and_restart(hosts, fault.host, procs, boot, down_s)
                        if fault.host == HOSTS[0]:
                            supervisor.procs = procs[fault.host]
                else:
                    hosts.cut(fault.host, redis_srv.port if fault.kind == "redis" else pg.port)
                    time.sleep(partition_s)
                    hosts.heal(fault.host)
                    note = f"cut from {fault.kind} for {partition_s:.0f} s"
                fault.healed = last_heal = time.time()
                summary.events.append(f"{fault.started - wall_start:.0f}s {fault.host} {note}")
                log(summary.events[-1])
            faults_ended = time.time()
            try:
                service.wait_batch(batch_id, timeout=max(1.0, deadline - time.monotonic()), poll_s=0.5)
            except TimeoutError as exc:
                summary.events.append(f"gave up waiting: {exc}")
            api_thread.join(max(1.0, deadline - time.monotonic()))
            api.wait_batches(deadline)
            summary.seconds = time.monotonic() - started
            if restarts := supervisor.stop():
                summary.events.append(f"beat restarted {restarts} times (the killed beat's lock had to expire)")
            time.sleep(1.0)
            with runtime.sessions() as s:
                tally(s, summary, batch_id)
                rows = s.execute(
                    text(
                        "SELECT extract(epoch FROM at), split_part(holder, '@', 1) FROM partition_finishes ORDER BY at"
                    )
                ).all()
            finishes = [(float(t), str(h)) for t, h in rows]
            for fault in plan:
                measure(fault, finishes, received(work, fault.host))
            summary.faults_timed = plan
            api.audit(runtime.sessions, tenant_id, work / "files")
            summary.api_faults, summary.api_problems = api.faults, api.problems
            client.close()
            count_messages(summary, work, faults_ended, left_in_queue=queue_length(redis_srv.url, "llm"))
            summary.model_calls = len(provider.calls)
            return summary
        finally:
            for host_procs in procs.values():
                for p in host_procs:
                    p.stop()
            if runtime is not None:
                runtime.close()
            provider.stop()
            redis_srv.stop()
            pg.destroy()
