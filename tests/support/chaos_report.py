"""What a chaos run ended with: the outcome per job, outputs written twice, stuck work, and the
broker messages per step (from Celery's own "received" log lines of every worker life)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass
class ChaosSummary:
    submitted: int = 0
    done: int = 0
    failed_with_reason: int = 0
    failed_without_reason: int = 0
    lost: int = 0  #: jobs not terminal at the end
    outputs_written_twice: int = 0
    stuck_tasks: int = 0  #: steps running/ready or rounds planning after the jobs ended
    redeliveries: int = 0  #: claims beyond the first, over steps and Conductor rounds
    steps: int = 0  #: step rows of the batch
    run_step_messages: int = 0  #: run_step messages the workers received, plus any left in the queue
    steps_after_faults: int = 0  #: steps that received a message after the last fault ended
    messages_after_faults: int = 0  #: run_step messages received after the last fault ended
    model_calls: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    seconds: float = 0.0
    failures: Counter[str] = field(default_factory=Counter)
    detail: list[str] = field(default_factory=list)  #: what unfinished jobs were doing

    @property
    def duplicates_bounded(self) -> bool:
        """Once the faults stop, at most 1.5 run_step messages per step (judged on 20+ steps)."""
        return self.steps_after_faults < 20 or self.messages_after_faults <= 1.5 * self.steps_after_faults

    @property
    def ok(self) -> bool:
        return (
            self.done + self.failed_with_reason == self.submitted
            and self.lost == 0
            and self.failed_without_reason == 0
            and self.outputs_written_twice == 0
            and self.stuck_tasks == 0
            and self.duplicates_bounded
        )

    def render(self) -> str:
        lines = [
            f"submitted {self.submitted}: done {self.done}, failed with a reason {self.failed_with_reason}, "
            f"failed without one {self.failed_without_reason}, lost {self.lost}",
            f"step outputs written twice: {self.outputs_written_twice}; tasks stuck: {self.stuck_tasks}; "
            f"re-deliveries: {self.redeliveries}; model calls: {self.model_calls}; {self.seconds:.0f} s",
            f"broker: {self.run_step_messages} run_step messages for {self.steps} steps "
            f"({self.run_step_messages / max(1, self.steps):.2f} per step); after the last fault "
            f"{self.messages_after_faults} for {self.steps_after_faults} steps "
            f"({self.messages_after_faults / max(1, self.steps_after_faults):.2f} per step)",
            f"provider faults answered: {dict(self.faults)}",
            "events: " + "; ".join(self.events),
        ]
        if self.failures:
            lines.append("failure reasons: " + "; ".join(f"{n}x {r}" for r, n in self.failures.most_common(5)))
        lines += self.detail
        lines.append("PASS" if self.ok else "FAIL")
        return "\n".join(lines)


def tally(s: Any, summary: ChaosSummary, batch_id: str) -> None:
    """Read the outcome from the store and the audit table into `summary`."""
    from sqlalchemy import func, select, text

    from conductor.store.models import Job, Round, Step

    jobs = s.execute(select(Job.status, Job.error).where(Job.batch_id == batch_id)).all()
    batch_jobs = select(Job.id).where(Job.batch_id == batch_id).scalar_subquery()
    for status, error in jobs:
        if status == "done":
            summary.done += 1
        elif status in ("failed", "budget_exceeded", "cancelled"):
            if error:
                summary.failed_with_reason += 1
                summary.failures[error[:100]] += 1
            else:
                summary.failed_without_reason += 1
        else:
            summary.lost += 1
    summary.lost += summary.submitted - len(jobs)
    summary.outputs_written_twice = (
        s.scalar(
            text(
                "SELECT count(*) FROM (SELECT step_id FROM chaos_output_writes GROUP BY step_id HAVING count(*) > 1) x"
            )
        )
        or 0
    )
    summary.stuck_tasks = (
        s.scalar(select(func.count()).where(Step.status.in_(["running", "ready"])).select_from(Step)) or 0
    ) + (s.scalar(select(func.count()).where(Round.status == "planning").select_from(Round)) or 0)
    summary.detail = [
        f"job {status}: steps {sorted(Counter(st for (st,) in steps).items())}"
        for status, steps in (
            (j.status, s.execute(select(Step.status).where(Step.job_id == j.id)).all())
            for j in s.scalars(
                select(Job).where(Job.batch_id == batch_id, Job.status.in_(["queued", "running", "waiting"]))
            )
        )
    ][:10]
    summary.steps = s.scalar(select(func.count()).select_from(Step).where(Step.job_id.in_(batch_jobs))) or 0
    summary.redeliveries = int(
        (s.scalar(select(func.coalesce(func.sum(Step.attempts - 1), 0)).where(Step.attempts > 1)) or 0)
        + (s.scalar(select(func.coalesce(func.sum(Round.attempts - 1), 0)).where(Round.attempts > 1)) or 0)
    )


RECEIVED = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}):.*Task conductor\.run_step\[step-(\d+)\] received", re.M
)


def queue_length(url: str, key: str) -> int:
    import redis

    with redis.Redis.from_url(url, socket_timeout=5) as client:
        return int(client.llen(key))  # type: ignore[arg-type]


def count_messages(summary: ChaosSummary, work: Path, faults_ended: float, *, left_in_queue: int) -> None:
    """run_step messages per step, from Celery's own "received" lines in every worker life's log
    (the driver's last fault ended at `faults_ended`, epoch seconds; logs carry local time)."""
    after: Counter[str] = Counter()
    total = left_in_queue
    for log_file in work.glob("*.worker.log"):
        for stamp, millis, step_id in RECEIVED.findall(log_file.read_text()):
            total += 1
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S").timestamp() + int(millis) / 1000
            if at > faults_ended:
                after[step_id] += 1
    summary.run_step_messages = total
    summary.steps_after_faults = len(after)
    summary.messages_after_faults = sum(after.values())


def worker_logs(work: Path) -> str:
    return "\n".join(f"--- {p.name}\n" + "\n".join(p.read_text().splitlines()[-30:]) for p in work.glob("*.log"))
