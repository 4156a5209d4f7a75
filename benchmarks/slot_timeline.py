"""Model calls in flight over time, for the direct loop and the system, and where the system's idle slots go.

The scripted server stamps every call's start and end (wall clock, so they line up with the store's
own stamps); the store's rows say, for each instant, how much work was

- **held by a worker thread doing database work**: a step leased and not yet calling, or called and
  not yet recorded (a plan: called and its steps not yet released);
- **ready, waiting in a queue**: a step ready and not yet leased; a plan round created and not yet
  called (its broker hop, a free thread taking the message, its lease);
- **waiting for admission**: a job submitted and not yet started;

and whatever free slot none of these explains is **nothing ready** (the work left is behind calls in
flight: the dependencies of a workflow, or the run's tail). A free slot is charged to the first
cause, in that order, that has work to fill it: a thread in database work cannot call, a slot with
work waiting in a queue is a slot the queue failed to fill.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

#: One model call as the scripted server saw it: (start, end, a Conductor call?), wall-clock seconds.
CallSpan = tuple[float, float, bool]

CAUSES = (
    "held by a thread doing database work",
    "ready, waiting in a queue",
    "waiting for admission",
    "nothing ready",
)


def _count(grid: np.ndarray, stamps: Iterable[float | None]) -> np.ndarray:
    """How many of `stamps` (None: never) are at or before each grid instant."""
    xs = np.sort(np.array([s for s in stamps if s is not None], dtype=float))
    return np.searchsorted(xs, grid, side="right").astype(float)


def _s(ts: datetime | None) -> float | None:
    return None if ts is None else ts.timestamp()


@dataclass
class Timeline:
    """One run's calls in flight (and, for the system, its idle slots by cause) on a common grid."""

    label: str
    t: np.ndarray  #: seconds from the run's start
    in_flight: np.ndarray
    gaps: dict[str, np.ndarray] = field(default_factory=dict)
    slots: int = 16

    @property
    def seconds(self) -> float:
        return float(self.t[-1]) if len(self.t) else 0.0

    def busy_share(self) -> float:
        """Mean calls in flight over the run, as a share of the slots."""
        return float(self.in_flight.mean() / self.slots) if len(self.t) else 0.0

    def gap_shares(self) -> dict[str, float]:
        """Each cause's slot-seconds as a share of all slot-seconds of the run."""
        total = self.slots * len(self.t)
        return {k: float(v.sum() / total) for k, v in self.gaps.items()} if total else {}


def _grid(t0: float, t1: float, step: float) -> np.ndarray:
    return np.arange(t0, t1 + step, step)


def _in_flight(grid: np.ndarray, calls: Sequence[CallSpan]) -> np.ndarray:
    return _count(grid, (c[0] for c in calls)) - _count(grid, (c[1] for c in calls))


def direct_timeline(calls: Sequence[CallSpan], t0: float, t1: float, slots: int, step: float = 0.005) -> Timeline:
    grid = _grid(t0, t1, step)
    return Timeline("direct asyncio loop", grid - t0, _in_flight(grid, calls), slots=slots)


@dataclass
class Rows:
    """The store's stamps of one run: steps (ready, leased, recorded), plan rounds (created, their
    steps released), jobs (submitted, started). Seconds, wall clock."""

    step_ready: list[float | None]
    step_leased: list[float | None]
    step_recorded: list[float | None]
    plan_created: list[float | None]
    plan_recorded: list[float | None]
    job_created: list[float | None]
    job_started: list[float | None]


def rows_of(service: Any, job_ids: list[str]) -> Rows:
    from sqlalchemy import func, select

    from conductor.store.models import Job, Round, Step

    out = Rows([], [], [], [], [], [], [])
    with service.sessions() as s:
        for chunk in (job_ids[i : i + 500] for i in range(0, len(job_ids), 500)):
            for ready, started, finished in s.execute(
                select(Step.ready_at, Step.started_at, Step.finished_at).where(Step.job_id.in_(chunk))
            ):
                out.step_ready.append(_s(ready))
                out.step_leased.append(_s(started))
                out.step_recorded.append(_s(finished))
            first_ready = (
                select(Step.round_id, func.min(Step.ready_at).label("ready"))
                .where(Step.job_id.in_(chunk))
                .group_by(Step.round_id)
                .subquery()
            )
            for created, ready, finished in s.execute(
                select(Round.created_at, first_ready.c.ready, Round.finished_at)
                .join_from(Round, first_ready, first_ready.c.round_id == Round.id, isouter=True)
                .where(Round.job_id.in_(chunk), Round.latency_s.is_not(None))  # rounds that called the Conductor
            ):
                out.plan_created.append(_s(created))
                out.plan_recorded.append(_s(ready if ready is not None else finished))  # a replan that kept it
            for created, started in s.execute(select(Job.created_at, Job.started_at).where(Job.id.in_(chunk))):
                out.job_created.append(_s(created))
                out.job_started.append(_s(started))
    return out


def system_timeline(
    label: str, calls: Sequence[CallSpan], rows: Rows, t0: float, t1: float, slots: int, step: float = 0.005
) -> Timeline:
    grid = _grid(t0, t1, step)
    step_calls = [c for c in calls if not c[2]]
    plan_calls = [c for c in calls if c[2]]
    flying = _in_flight(grid, calls)
    step_call_started = _count(grid, (c[0] for c in step_calls))
    step_call_ended = _count(grid, (c[1] for c in step_calls))
    plan_call_started = _count(grid, (c[0] for c in plan_calls))
    plan_call_ended = _count(grid, (c[1] for c in plan_calls))
    leased = _count(grid, rows.step_leased)
    held = np.clip(leased - step_call_started, 0, None)  # leased, not yet calling
    held += np.clip(step_call_ended - _count(grid, rows.step_recorded), 0, None)  # called, not yet recorded
    held += np.clip(plan_call_ended - _count(grid, rows.plan_recorded), 0, None)  # plan called, not recorded
    queued = np.clip(_count(grid, rows.step_ready) - leased, 0, None)
    queued += np.clip(_count(grid, rows.plan_created) - plan_call_started, 0, None)
    admission = np.clip(_count(grid, rows.job_created) - _count(grid, rows.job_started), 0, None)
    free = np.clip(slots - flying, 0, None)
    gaps: dict[str, np.ndarray] = {}
    for cause, work in zip(CAUSES[:3], (held, queued, admission), strict=True):
        gaps[cause] = np.minimum(free, work)
        free = free - gaps[cause]
    gaps[CAUSES[3]] = free
    return Timeline(label, grid - t0, flying, gaps, slots=slots)


def draw(path: Path, title: str, direct: Timeline, system: Timeline) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, height_ratios=(1, 1))
    for tl, colour in ((direct, "tab:blue"), (system, "tab:orange")):
        top.plot(
            tl.t,
            tl.in_flight,
            lw=0.9,
            color=colour,
            label=f"{tl.label}: {tl.seconds:.1f} s, {100 * tl.busy_share():.0f}% of slots busy",
        )
    top.axhline(direct.slots, color="grey", lw=0.6, ls=":")
    top.set_ylabel("model calls in flight")
    top.set_ylim(0, direct.slots * 1.15)
    top.legend(loc="lower center", fontsize=8)
    top.set_title(title, fontsize=10)
    colours = ("tab:red", "tab:purple", "tab:olive", "lightgrey")
    shares = system.gap_shares()
    bottom.stackplot(
        system.t,
        [system.gaps[c] for c in CAUSES],
        colors=colours,
        labels=[f"{c} ({100 * shares[c]:.1f}% of slot-time)" for c in CAUSES],
        step="post",
    )
    bottom.set_ylabel("system: idle slots, by cause")
    bottom.set_xlabel("seconds from the first submission")
    bottom.set_ylim(0, direct.slots)
    bottom.legend(loc="upper center", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def gap_table(rows: list[tuple[str, Timeline]]) -> str:
    """Markdown: per run, slots busy and each cause's share of slot-time."""
    head = "| run | seconds | slots busy | " + " | ".join(CAUSES) + " |\n|---|---:|---:|" + "---:|" * len(CAUSES)
    lines = [head]
    for name, tl in rows:
        shares = tl.gap_shares()
        cells = " | ".join(f"{100 * shares[c]:.1f}%" if c in shares else "-" for c in CAUSES)
        lines.append(f"| {name} | {tl.seconds:.1f} | {100 * tl.busy_share():.1f}% | {cells} |")
    return "\n".join(lines)
