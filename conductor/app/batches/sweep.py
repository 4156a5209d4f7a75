"""Beat's batch sweep: what moves Batch API batches along when no API request arrives.

Every `batch_sweep_s` a worker runs it (sent by beat, or by the embedded worker):

- a batch past its `expires_at` is expired: its open jobs are cancelled, then it is finalized like
  any other (a batch still being read stops reading: the lines read so far are its requests);
- a batch whose jobs have all ended is claimed (`finalizing`, guarded) and its files are written by
  a `finalize` message;
- a read (`validating`) or a finalize (`finalizing`) whose worker or message was lost is sent
  again under the reaper's rules (`ResendPolicy`): never while its message waits in a queue,
  first after `ready_grace_s` without a send or sign of progress, then at a doubling interval.
  The send is recorded on the batch row with a compare-and-set, so two sweeps never both send it.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update

from conductor.app.batches.ingest import rowcount
from conductor.domain.resend import ResendPolicy, as_utc, latest
from conductor.domain.states import BatchStatus
from conductor.store.models import Batch, utcnow

if TYPE_CHECKING:
    from conductor.app.batches.batch_api import Batches

VALIDATING = BatchStatus.VALIDATING.value
IN_PROGRESS = BatchStatus.IN_PROGRESS.value
CANCELLING = BatchStatus.CANCELLING.value
FINALIZING = BatchStatus.FINALIZING.value

#: Task id prefixes of batch work (`tasks.batches`): a message found in a queue under one is waiting.
TASK_PREFIX = {"read": "batch_read", "finalize": "batch_finalize"}


def task_id(kind: str, batch_id: str) -> str:
    return f"{TASK_PREFIX[kind]}-{batch_id}"


class BatchSweep:
    def __init__(self, batches: Batches, policy: ResendPolicy) -> None:
        self.batches = batches
        self.sessions = batches.sessions
        self.policy = policy

    def run(self, waiting: set[str] | None) -> list[tuple[str, str]]:
        """(kind, batch id) of the work to send now. `waiting`: the task ids in the broker's queues
        (None where they cannot be read: time alone decides)."""
        waiting = waiting or set()
        t = utcnow()
        with self.sessions() as s:
            rows = s.execute(
                select(
                    Batch.id, Batch.status, Batch.expires_at, Batch.created_at, Batch.finalizing_at, Batch.sent_at,
                    Batch.sends,
                ).where(Batch.status.in_([VALIDATING, IN_PROGRESS, CANCELLING, FINALIZING]))
            ).all()  # fmt: skip
        out: list[tuple[str, str]] = []
        for r in rows:
            expired = r.expires_at is not None and as_utc(r.expires_at) <= t
            if r.status == VALIDATING and expired:
                self._stop_reading(r.id)
            elif r.status == VALIDATING:
                if self._resend_due(r, r.created_at, t, task_id("read", r.id) in waiting):
                    out.append(("read", r.id))
                continue
            elif r.status == FINALIZING:
                if self._resend_due(r, r.finalizing_at, t, task_id("finalize", r.id) in waiting):
                    out.append(("finalize", r.id))
                continue
            if r.status != CANCELLING and expired:
                self.batches.cancel_open_jobs(r.id)
            if not self.batches.unfinished(r.id) and self._claim(r.id, t):
                out.append(("finalize", r.id))
        return out

    def _resend_due(self, r: Any, since: datetime | None, t: datetime, is_waiting: bool) -> bool:
        """Send again if overdue and not waiting in a queue; recorded only if no other sweep did."""
        last = latest(since, r.sent_at) or t
        if is_waiting or not self.policy.due(last, r.sends, t):
            return False
        unchanged = Batch.sent_at.is_(None) if r.sent_at is None else Batch.sent_at == r.sent_at
        with self.sessions.begin() as s:
            moved = s.execute(
                update(Batch)
                .where(Batch.id == r.id, Batch.status == r.status, unchanged)
                .values(sent_at=t, sends=Batch.sends + 1)
            )
        return rowcount(moved) == 1

    def _stop_reading(self, batch_id: str) -> None:
        """The window ran out while the file was still being read: the lines read so far are the
        batch (the reader's next chunk fails its compare-and-set and it stops)."""
        with self.sessions.begin() as s:
            s.execute(
                update(Batch)
                .where(Batch.id == batch_id, Batch.status == VALIDATING)
                .values(status=IN_PROGRESS, in_progress_at=utcnow())
            )

    def _claim(self, batch_id: str, t: datetime) -> bool:
        """Every job ended: mark the batch finalizing (once, whoever sweeps) for a worker to write its files."""
        with self.sessions.begin() as s:
            moved = s.execute(
                update(Batch)
                .where(Batch.id == batch_id, Batch.status.in_([IN_PROGRESS, CANCELLING]), Batch.finalizing_at.is_(None))
                .values(status=FINALIZING, finalizing_at=t, sent_at=t)
            )
        return rowcount(moved) == 1
