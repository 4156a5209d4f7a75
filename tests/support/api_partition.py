"""The API host partitioned during a Batch API upload (issue 28): `conductor api` runs on a host of
its own (a network namespace, `tests.support.hosts`), and a client outside it (this process, on the
bridge's infra address) uploads a Batch API input file (POST /v1/files, streamed slowly) and creates
a batch of it (POST /v1/batches). Midway through the upload one link goes silent (packets dropped):

- `api-postgres`: the API host from PostgreSQL;
- `api-redis`: the API host from Redis (the batch is then created while the broker is away);
- `api-client`: the client from the API host.

What must hold: the client gets an answer it can act on (a success whose file and batch are
complete, or an error: 503 for a store or broker that did not answer, or its own timeout when it
is the one cut off), nothing half-written is left usable (every stored file is whole; every batch
row is one the client was told about), after the heal the API answers promptly (no request thread
hung on a dead link) and a retried upload and batch creation succeed, and every line of every batch
ends done or failed with a reason. Per fault: how long until the API served again after the heal.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.api_deployment import batch_file, wait_http
from tests.support.hosts import Hosts

API_FAULTS = ("api-postgres", "api-redis", "api-client")
API_HOST = "api"
LINES = 4  #: lines per uploaded batch file (each becomes a job on the worker hosts)


@dataclass
class ApiFault:
    kind: str  #: one of API_FAULTS
    started: float = 0.0  #: epoch seconds
    healed: float = 0.0
    upload: str = ""  #: what the client saw for the upload (and the batch creation) under the fault
    answered_s: float | None = None  #: how long the client waited for that answer
    serves_s: float | None = None  #: heal -> an authenticated request answered 200
    retried_s: float | None = None  #: heal -> a retried upload + batch creation both succeeded
    batches: list[str] = field(default_factory=list)  #: the batches the client was told were created

    def render(self) -> str:
        def s(v: float | None) -> str:
            return "never" if v is None else f"{v:.1f} s"

        what = {
            "api-postgres": "API host cut from PostgreSQL mid-upload",
            "api-redis": "API host cut from Redis mid-upload",
            "api-client": "client cut from the API host mid-upload",
        }
        return (
            f"| {what[self.kind]} | {self.healed - self.started:.0f} s | {self.upload} | {s(self.answered_s)} | "
            f"{s(self.serves_s)} | {s(self.retried_s)} |"
        )

    @property
    def ok(self) -> bool:
        return self.serves_s is not None and self.retried_s is not None and bool(self.batches)


def render_api(faults: list[ApiFault], problems: list[str]) -> str:
    table = [
        "| API fault | lasted | the client saw (upload; batch) | answered after | API serves again (after heal) | "
        "retried upload + batch created (after heal) |",
        "|---|---|---|---|---|---|",
        *(f.render() for f in faults),
    ]
    return "\n".join([*table, *(f"API problem: {p}" for p in problems)])


class ApiClient:
    """The Files and Batch API over plain HTTP, the upload streamed line by line so that a fault can
    land in the middle of it."""

    def __init__(self, base_url: str, key: str) -> None:
        self.http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"})

    def upload(self, data: bytes, *, midway: Callable[[], None] | None = None, timeout: float = 90.0) -> httpx.Response:
        boundary = "part" + secrets.token_hex(8)
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="lines.jsonl"\r\n'
            "Content-Type: application/jsonl\r\n\r\n"
        ).encode()
        lines = data.splitlines(keepends=True)

        def body():  # type: ignore[no-untyped-def]
            yield head
            for i, line in enumerate(lines):
                if i == len(lines) // 2 and midway is not None:
                    midway()  # half the file is on its way: the fault lands now
                yield line
            yield f"\r\n--{boundary}--\r\n".encode()

        return self.http.post(
            "/v1/files",
            content=body(),
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
            timeout=timeout,
        )

    def create_batch(self, file_id: str, timeout: float = 90.0) -> httpx.Response:
        body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        return self.http.post("/v1/batches", json=body, timeout=timeout)

    def batch(self, batch_id: str, timeout: float = 10.0) -> dict[str, Any]:
        r = self.http.get(f"/v1/batches/{batch_id}", timeout=timeout)
        r.raise_for_status()
        return r.json()  # type: ignore[no-any-return]

    def probe(self, timeout: float = 2.0) -> bool:
        """An authenticated read (a key check and a query in PostgreSQL) answered 200 in time."""
        try:
            return self.http.get("/v1/batches?limit=1", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        self.http.close()


def _said(r: httpx.Response) -> str:
    """The status and the error's code (or type): `200`, `503 service_unavailable`."""
    if r.status_code == 200:
        return "200"
    try:
        error = r.json()["error"]
        what = error.get("code") or error.get("type") or ""
    except (ValueError, KeyError, TypeError, AttributeError):
        what = r.text[:40]
    return f"{r.status_code} {what}".strip()


class ApiPartitions:
    """Runs the API faults against `conductor api` on `hosts`' API host (the caller boots it with
    `boot_api`), keeping what the client was told."""

    def __init__(self, hosts: Hosts, ports: dict[str, int], client: ApiClient, log: Any = print) -> None:
        self.hosts, self.ports, self.client, self.log = hosts, ports, client, log
        self.faults: list[ApiFault] = []
        self.files: list[str] = []  #: file ids the client was told were stored
        self.problems: list[str] = []

    def start(
        self, kinds: list[str], settle_s: float, partition_s: float, events: list[str], wall_start: float
    ) -> threading.Thread:
        """Run `kinds` one after another in a thread of their own (beside the worker hosts' faults:
        the links are apart), `settle_s` apart; each noted in `events`."""

        def drive() -> None:
            for serial, kind in enumerate(kinds):
                time.sleep(settle_s)
                try:
                    fault = self.run(kind, partition_s, serial)
                except Exception as exc:  # the driver's own failure: reported, never silent
                    self.problems.append(f"{kind}: the fault driver failed: {exc!r}")
                    self.hosts.heal(API_HOST)
                    continue
                events.append(f"{fault.started - wall_start:.0f}s {kind} for {partition_s:.0f} s")

        thread = threading.Thread(target=drive, name="api-faults", daemon=True)
        thread.start()
        return thread

    def run(self, kind: str, partition_s: float, serial: int) -> ApiFault:
        fault = ApiFault(kind)
        data = batch_file(LINES, workflow="single", prefix=f"{kind}-{serial}-")
        cut = {"api-postgres": self.ports["postgres"], "api-redis": self.ports["redis"]}

        def midway() -> None:
            fault.started = time.time()
            if kind == "api-client":
                self.hosts.cut_clients(API_HOST, self.ports["api"])
            else:
                self.hosts.cut(API_HOST, cut[kind])
            time.sleep(0.3)  # the rest of the upload goes into the partition

        asked = time.time()
        seen: list[str] = []
        try:
            # The client cut off gives up on its own clock; the others wait for the API's answer.
            r = self.client.upload(data, midway=midway, timeout=6.0 if kind == "api-client" else 90.0)
            seen.append(_said(r))
            if r.status_code == 200:
                self.files.append(r.json()["id"])
                b = self.client.create_batch(r.json()["id"], timeout=90.0)
                seen.append(_said(b))
                if b.status_code == 200:
                    fault.batches.append(b.json()["id"])
        except httpx.HTTPError as exc:
            seen.append(f"client {type(exc).__name__}")
        fault.answered_s = time.time() - asked
        fault.upload = "; ".join(seen)
        time.sleep(max(0.0, fault.started + partition_s - time.time()))
        self.hosts.heal(API_HOST)
        fault.healed = time.time()
        self._after_heal(fault, serial)
        self.faults.append(fault)
        self.log(
            f"{kind}: the client saw {fault.upload} after {fault.answered_s:.1f} s; serves again "
            f"{fault.serves_s} s after the heal, retry done {fault.retried_s} s after it"
        )
        return fault

    def _after_heal(self, fault: ApiFault, serial: int, give_up_s: float = 60.0) -> None:
        while time.time() - fault.healed < give_up_s:
            if self.client.probe():
                fault.serves_s = time.time() - fault.healed
                break
            time.sleep(0.2)
        # No request thread is left hung: a burst of reads is answered at once.
        with ThreadPoolExecutor(8) as pool:
            t0 = time.monotonic()
            answered = list(pool.map(lambda _: self.client.probe(timeout=5.0), range(8)))
            if not all(answered) or time.monotonic() - t0 > 5.0:
                self.problems.append(f"{fault.kind}: a burst of 8 reads after the heal: {answered}")
        data = batch_file(LINES, workflow="single", prefix=f"{fault.kind}-{serial}-retry-")
        while time.time() - fault.healed < give_up_s:
            try:
                r = self.client.upload(data, timeout=20.0)
                if r.status_code == 200:
                    self.files.append(r.json()["id"])
                    b = self.client.create_batch(r.json()["id"], timeout=20.0)
                    if b.status_code == 200:
                        fault.batches.append(b.json()["id"])
                        fault.retried_s = time.time() - fault.healed
                        return
                    self.problems.append(f"{fault.kind}: retried batch creation answered {_said(b)}")
                else:
                    self.problems.append(f"{fault.kind}: retried upload answered {_said(r)}")
            except httpx.HTTPError as exc:
                self.problems.append(f"{fault.kind}: retry: {type(exc).__name__}")
            time.sleep(1.0)

    def batch_ids(self) -> list[str]:
        return [b for f in self.faults for b in f.batches]

    def wait_batches(self, deadline: float) -> None:
        """Until every batch the client created is over, or the deadline (monotonic) passes."""
        pending = set(self.batch_ids())
        while pending and time.monotonic() < deadline:
            for b in list(pending):
                try:
                    if self.client.batch(b)["status"] in ("completed", "failed", "expired", "cancelled"):
                        pending.discard(b)
                except httpx.HTTPError:
                    pass
            time.sleep(1.0)

    def audit(self, sessions: Any, tenant_id: str, files_dir: Path) -> None:
        """Nothing half-written is usable or left behind; every line of every batch ended, done or
        with a reason."""
        from sqlalchemy import select

        from conductor.store.models import Batch, File, Job

        told = set(self.batch_ids())
        with sessions() as s:
            known = set(s.scalars(select(File.path)))
            for orphan in sorted(str(p) for p in files_dir.glob("file-*") if str(p) not in known):
                self.problems.append(f"an upload left on disk with no file row: {orphan}")
            for f in s.scalars(select(File).where(File.tenant_id == tenant_id, File.purpose == "batch")):
                path = Path(f.path)
                if not path.exists() or path.stat().st_size != f.bytes:
                    self.problems.append(f"file {f.id} is not whole on disk ({f.bytes} bytes recorded)")
            for b in s.scalars(select(Batch).where(Batch.tenant_id == tenant_id, Batch.status.is_not(None))):
                if b.id not in told:
                    self.problems.append(f"batch {b.id} exists though the client was told it failed")
            jobs = s.execute(select(Job.batch_id, Job.status, Job.error).where(Job.batch_id.in_(told))).all()
        per_batch: dict[str, int] = {}
        for batch_id, status, error in jobs:
            per_batch[batch_id] = per_batch.get(batch_id, 0) + 1
            if status != "done" and not (status in ("failed", "cancelled", "budget_exceeded") and error):
                self.problems.append(f"batch {batch_id}: a line ended {status} without a reason")
        for b in told:
            view = self.client.batch(b)
            counts = view["request_counts"]
            if view["status"] != "completed" or counts["completed"] + counts["failed"] != LINES:
                self.problems.append(f"batch {b} ended {view['status']} with {counts} ({per_batch.get(b, 0)} jobs)")

    @property
    def ok(self) -> bool:
        return not self.problems and all(f.ok for f in self.faults)


def boot_api(hosts: Hosts, env: dict[str, str], work: Path, port: int, life: int = 1) -> Any:
    """`conductor api` on the API host, listening on its bridge address."""
    from tests.support.cluster import Proc

    args = ["api", "--host", "0.0.0.0", "--port", str(port), "--log-level", "info"]
    proc = Proc(API_HOST, args, env, work / f"{API_HOST}.{life}.api.log", prefix=hosts.exec_prefix(API_HOST))
    wait_http(f"http://{hosts.address(API_HOST)}:{port}/openapi.json", proc)
    return proc
