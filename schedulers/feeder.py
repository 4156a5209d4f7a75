"""The admission seam: jobs wait in the store and enter the broker only as the cluster has room.

A 100,000-problem batch must not become 100,000 `solve` messages at once (Redis memory, a
reaper that re-sends every queued job, one tenant's batch starving everyone else's). Jobs are
written with status ``waiting``; :meth:`Feeder.admit` moves some of them to ``queued`` and
sends their ``solve`` messages, never more than the limits allow:

* ``max_in_flight``: jobs ``queued`` or ``running`` at once, cluster-wide;
* ``max_queue_depth``: messages in the queues, the larger of what the broker holds (Redis only:
  ``LLEN``) and what admitted work still owes them by the store's count (`schedulers.backlog`:
  the steps of plans not yet written included), each new job counted at its expected messages;
* ``chunk``: jobs admitted by one pass.

Which waiting jobs go first is decided here, once, for every way in (CLI batches, the HTTP
API, the Batch API): tenants share the free slots in proportion to their weights (weighted
max-min fairness over what each tenant already has in flight: a tenant with weight 2 gets
twice the slots of a tenant with weight 1 while both have work waiting, and an idle tenant's
share goes to the others), and within a tenant higher ``priority`` (0-9, default 5) goes
first, then the oldest (then the batch's line order).

Anyone may call ``admit()``: the submitting CLI while it follows its batch, ``finalize`` when a
job ends (throttled by `maybe_admit`), the reaper on every beat tick, the API after a submit. On
PostgreSQL, concurrent passes are serialised by an advisory lock (a pass that finds it taken
does nothing: the holder admits for everyone); each job is moved ``waiting -> queued`` by a
guarded UPDATE, so it is admitted once. A crash between that commit and the send leaves a
``queued`` job without a message: the reaper re-sends those (``Recovery.recover``).
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, literal_column, select, text, update
from sqlalchemy.orm import Session, sessionmaker

from conductor.config.settings import Settings
from conductor.domain.states import JobStatus
from conductor.store.models import Job
from schedulers.backlog import pipeline_backlog

#: A job written to the store but not yet admitted into the broker.
WAITING = JobStatus.WAITING
IN_FLIGHT = (JobStatus.QUEUED, JobStatus.RUNNING)
_ADVISORY_KEY = 0x0C0DF33D  # pg_try_advisory_xact_lock key of the admission pass


@dataclass(frozen=True)
class FeederLimits:
    max_in_flight: int = 1000
    max_queue_depth: int = 2000
    chunk: int = 500
    #: steps a plan is expected to bring until the store has rounds to measure (settings.max_steps)
    default_steps: int = 5


def fair_shares(
    capacity: int,
    waiting: Mapping[str, int],
    in_flight: Mapping[str, int],
    weights: Mapping[str, float] | None = None,
    default_weight: float = 1.0,
) -> dict[str, int]:
    """Split `capacity` free slots among tenants with waiting jobs (weighted water-filling).

    Each slot goes to the tenant whose (in flight + given) / weight is lowest, never past what
    it has waiting; ties go to the lexicographically first tenant, so the split is deterministic.
    """
    weights = weights or {}
    given = {t: 0 for t, n in waiting.items() if n > 0}
    heap = [((in_flight.get(t, 0)) / _w(weights, t, default_weight), t) for t in given]
    heapq.heapify(heap)
    left = max(0, capacity)
    while left and heap:
        _, t = heapq.heappop(heap)
        given[t] += 1
        left -= 1
        if given[t] < waiting[t]:
            heapq.heappush(heap, ((in_flight.get(t, 0) + given[t]) / _w(weights, t, default_weight), t))
    return {t: n for t, n in given.items() if n}


def _w(weights: Mapping[str, float], tenant: str, default: float) -> float:
    w = weights.get(tenant, default)
    return w if w > 0 else 1e-9


@dataclass
class AdmitReport:
    admitted: int = 0
    waiting: int = 0
    in_flight: int = 0
    queue_depth: int | None = None
    backlog: float | None = None  #: messages admitted work owes the queues (`schedulers.backlog`)
    skipped: str | None = None  #: why this pass admitted nothing (lock held, limits reached)


class Feeder:
    """Admits waiting jobs under the limits, fairly across tenants and by priority."""

    def __init__(
        self,
        sessions: sessionmaker[Session],
        send: Callable[[list[str]], None],
        *,
        limits: FeederLimits | None = None,
        weights: Mapping[str, float] | Callable[[], Mapping[str, float]] | None = None,
        default_weight: float = 1.0,
        queue_depth: Callable[[], int] | None = None,
    ) -> None:
        self.sessions = sessions
        self.send = send
        self.limits = limits or FeederLimits()
        self._weights = weights
        self.default_weight = default_weight
        self.queue_depth = queue_depth
        self._local = threading.Lock()  # one pass at a time in this process (SQLite has no advisory lock)
        self._last_maybe = 0.0

    def weights(self) -> Mapping[str, float]:
        w = self._weights
        return (w() if callable(w) else w) or {}

    def maybe_admit(self, min_interval_s: float = 0.25) -> AdmitReport | None:
        """`admit()` at most every `min_interval_s` in this process (callers on hot paths: finalize)."""
        t = time.monotonic()
        if t - self._last_maybe < min_interval_s:
            return None
        self._last_maybe = t
        return self.admit()

    def admit(self) -> AdmitReport:
        if not self._local.acquire(blocking=False):
            return AdmitReport(skipped="another pass is running in this process")
        try:
            return self._admit()
        finally:
            self._local.release()

    def _admit(self) -> AdmitReport:
        report = AdmitReport()
        admitted: list[str] = []
        with self.sessions.begin() as s:
            waiting: dict[str, int] = dict(
                s.execute(
                    select(_tenant_key(), func.count()).where(Job.status == WAITING).group_by(_tenant_key())
                ).all()
            )
            report.waiting = sum(waiting.values())
            if not report.waiting:
                return report
            if s.get_bind().dialect.name == "postgresql" and not s.scalar(
                text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": _ADVISORY_KEY}
            ):
                report.skipped = "another process is admitting"
                return report
            in_flight: dict[str, int] = dict(
                s.execute(
                    select(_tenant_key(), func.count()).where(Job.status.in_(IN_FLIGHT)).group_by(_tenant_key())
                ).all()
            )
            report.in_flight = sum(in_flight.values())
            room = min(self.limits.chunk, self.limits.max_in_flight - report.in_flight)
            # The depth limit counts what admitted jobs will still release (their plans' steps),
            # not only what waits in the broker now, so the `llm` queue stays bounded too.
            backlog = pipeline_backlog(s, default_steps=self.limits.default_steps)
            report.backlog = backlog.messages
            depth = backlog.messages
            if self.queue_depth is not None:
                report.queue_depth = self.queue_depth()
                depth = max(depth, report.queue_depth)
            fits = math.floor((self.limits.max_queue_depth - depth) / backlog.per_job)
            room = min(room, fits if depth > 0 else max(1, fits))  # an idle cluster always takes one
            if room <= 0:
                report.skipped = "limits reached"
                return report
            shares = fair_shares(room, waiting, in_flight, self.weights(), self.default_weight)
            t = _now()
            for tenant, n in shares.items():
                ids = list(
                    s.scalars(
                        select(Job.id)
                        .where(Job.status == WAITING, _tenant_key() == tenant)
                        .order_by(Job.priority.desc(), Job.created_at, Job.line_no, Job.id)
                        .limit(n)
                    )
                )
                if not ids:
                    continue
                # Guarded: a job another admitter (or a cancel) got to first is not admitted twice.
                # started_at marks the admission until `start_job` overwrites it with the real start.
                got = s.execute(
                    update(Job)
                    .where(Job.id.in_(ids), Job.status == WAITING)
                    .values(status=JobStatus.QUEUED, started_at=t)
                    .returning(Job.id)
                ).all()
                admitted += [row[0] for row in got]
        if admitted:
            self.send(admitted)  # after the commit: a lost send is repaired by the reaper
        report.admitted = len(admitted)
        return report

    def drain(
        self, done: Callable[[], bool], *, poll_s: float = 0.5, on_report: Callable[[AdmitReport], Any] | None = None
    ) -> None:
        """Admit until `done()` (e.g. a batch has no waiting job left); the CLI's follow loop."""
        while not done():
            r = self.admit()
            if on_report:
                on_report(r)
            if not r.admitted:
                time.sleep(poll_s)


def _tenant_key() -> Any:
    # A literal, not a bound parameter: PostgreSQL must see GROUP BY and SELECT as one expression.
    return func.coalesce(Job.tenant_id, literal_column("''"))


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def feeder_for(sessions: sessionmaker[Session], settings: Settings, send: Callable[[list[str]], None]) -> Feeder:
    """The feeder a process uses, from its settings (queue depth probed on a Redis broker)."""
    from schedulers.broker import redis_queue_depth
    from tasks.names import QUEUES

    depth = None
    if settings.broker_url.startswith(("redis://", "rediss://")):
        depth = redis_queue_depth(
            settings.broker_url, [q for q in QUEUES if q not in ("reward", "train")], settings.links
        )
    limits = FeederLimits(
        max_in_flight=settings.max_in_flight_jobs,
        max_queue_depth=settings.max_queue_depth,
        default_steps=settings.max_steps,
    )
    return Feeder(sessions, send, limits=limits, queue_depth=depth)
