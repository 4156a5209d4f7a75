"""What a partition run measured, per fault: when it began and healed, how long until the faulted host
finished a step again, and how long until the cluster's step throughput came back."""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tests.support.api_partition import ApiFault, render_api
from tests.support.chaos_report import ChaosSummary

#: Throughput counts as recovered once a window of this many seconds after the heal finishes at
#: least RECOVERED of the steps the same window finished before the fault.
WINDOW_S = 10.0
RECOVERED = 0.8


@dataclass
class Fault:
    kind: str  #: "redis" or "postgres" (a silent partition from that port), or "kill" (the whole host)
    host: str
    started: float = 0.0  #: epoch seconds
    healed: float = 0.0
    baseline_per_s: float = 0.0
    dip_per_s: float | None = None  #: the slowest window while the fault lasted
    host_consumes_s: float | None = None  #: heal -> the host's worker received a task (any queue)
    host_resumed_s: float | None = None  #: heal -> the host's first finished step
    throughput_recovered_s: float | None = None  #: heal -> a window back at RECOVERED of the baseline

    def render(self) -> str:
        def s(v: float | None) -> str:
            return "never" if v is None else f"{v:.1f} s"

        what = {"redis": "cut from Redis", "postgres": "cut from PostgreSQL", "kill": "killed (all processes)"}
        dip = "-" if self.dip_per_s is None else f"{self.dip_per_s:.1f}"
        return (
            f"| {self.host} {what[self.kind]} | {self.healed - self.started:.0f} s | {s(self.host_consumes_s)} | "
            f"{s(self.host_resumed_s)} | "
            f"{s(self.throughput_recovered_s)} | {self.baseline_per_s:.1f} -> {dip} |"
        )


@dataclass
class PartitionSummary(ChaosSummary):
    faults_timed: list[Fault] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    api_faults: list[ApiFault] = field(default_factory=list)
    api_problems: list[str] = field(default_factory=list)

    @property
    def hosts_resumed(self) -> bool:
        return all(f.host_consumes_s is not None for f in self.faults_timed)

    @property
    def api_ok(self) -> bool:
        return not self.api_problems and all(f.ok for f in self.api_faults)

    @property
    def ok(self) -> bool:
        return super().ok and self.hosts_resumed and self.api_ok

    def render(self) -> str:
        table = [
            "| fault | lasted | host consumes again (after heal) | host finishes a step again | "
            "throughput recovered (after heal) | steps/s before -> dip |",
            "|---|---|---|---|---|---|",
            *(f.render() for f in self.faults_timed),
        ]
        knobs = ", ".join(f"{k}={v}" for k, v in self.links.items())
        api = [render_api(self.api_faults, self.api_problems)] if self.api_faults or self.api_problems else []
        return "\n".join([*table, *api, f"links: {knobs}", super().render()])


RECEIVED = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}):.*Task \S+\[\S+\] received", re.M)


def received(work: Path, host: str) -> list[float]:
    """When `host`'s workers received a task, from Celery's log lines of every life (local time)."""
    stamps = [
        datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp() + int(ms) / 1000
        for log in work.glob(f"{host}.*.worker.log")
        for stamp, ms in RECEIVED.findall(log.read_text())
    ]
    return sorted(stamps)


def measure(fault: Fault, finishes: list[tuple[float, str]], host_received: list[float]) -> None:
    """Fill in `fault`'s timings from every finished step, as (epoch seconds, holder host) sorted by
    time, and from when the faulted host received tasks."""
    times = [t for t, _ in finishes]
    fault.host_consumes_s = next((t - fault.healed for t in host_received if t > fault.healed), None)

    def rate(start: float) -> float:
        return (bisect_left(times, start + WINDOW_S) - bisect_left(times, start)) / WINDOW_S

    fault.baseline_per_s = rate(fault.started - WINDOW_S)
    during = [rate(t) for t in _steps(fault.started, max(fault.started, fault.healed - WINDOW_S))]
    fault.dip_per_s = min(during) if during else None
    fault.host_resumed_s = next((t - fault.healed for t, h in finishes if t > fault.healed and h == fault.host), None)
    last = times[-1] if times else fault.healed
    fault.throughput_recovered_s = next(
        (
            t - fault.healed
            for t in _steps(fault.healed, last - WINDOW_S)
            if rate(t) >= RECOVERED * fault.baseline_per_s
        ),
        None,
    )


def _steps(start: float, end: float, step: float = 0.5) -> list[float]:
    n = int((end - start) / step) + 1 if end >= start else 0
    return [start + i * step for i in range(n)]
