"""Repairing a batch: its failed lines run again as a new batch linked to the old one
(`metadata.retry_of`), so the old batch's files and numbers stay as they were.

A failed line is one whose job ended `failed` or `cancelled` (a batch that expired cancels what was
left). Malformed input lines are not retried: they would fail the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from conductor.app.batches.batch_api import Batches
from conductor.app.tenants import owned
from conductor.domain.errors import Conflict, NotFound
from conductor.domain.states import TERMINAL_BATCH, JobStatus
from conductor.store.models import Batch, File, Job

RETRIED = (JobStatus.FAILED.value, JobStatus.CANCELLED.value)


def failed_lines(batches: Batches, batch_id: str) -> set[int]:
    with batches.sessions() as s:
        return {
            n
            for n in s.scalars(select(Job.line_no).where(Job.batch_id == batch_id, Job.status.in_(RETRIED)))
            if n is not None
        }


def retry_failed(batches: Batches, tenant_id: str, batch_id: str) -> Batch:
    """A new Batch API batch of the old one's failed lines (their original request bodies, so effort and
    max_usd carry over). The old batch must have ended; a batch with nothing failed is a 409."""
    with batches.sessions() as s:
        old = owned(s, Batch, batch_id, tenant_id, "batch")
        if old.status is None or old.input_file_id is None:
            raise NotFound(f"no batch {batch_id}")
        if old.status not in {b.value for b in TERMINAL_BATCH}:
            raise Conflict(f"batch {batch_id} is {old.status}; retry its failed lines once it has ended")
        src = s.get_one(File, old.input_file_id)
        endpoint, window, meta = old.endpoint or "/v1/chat/completions", old.completion_window or "24h", old.meta
    lines = failed_lines(batches, batch_id)
    if not lines:
        raise Conflict(f"batch {batch_id} has no failed lines to retry")

    def chosen() -> Any:
        with Path(src.path).open("rb") as fh:
            for line_no, raw in enumerate(fh, start=1):
                if line_no in lines:
                    yield raw if raw.endswith(b"\n") else raw + b"\n"

    retry_file = batches.save_file(tenant_id, f"retry-of-{batch_id}.jsonl", "batch", chosen())
    batch = batches.create(
        tenant_id, retry_file.id, endpoint=endpoint, window=window, metadata={**(meta or {}), "retry_of": batch_id}
    )
    batches.ingest(batch.id)
    return batch


def failed_problems_file(batches: Batches, batch_id: str, out: Path) -> int:
    """A `conductor run` batch's failed problems as a JSONL problem file; returns how many."""
    with batches.sessions() as s:
        if s.get(Batch, batch_id) is None:
            raise NotFound(f"no batch {batch_id}")
        rows = s.scalars(
            select(Job.problem).where(Job.batch_id == batch_id, Job.status.in_(RETRIED)).order_by(Job.line_no)
        ).all()
    if not rows:
        raise Conflict(f"batch {batch_id} has no failed lines to retry")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps({k: v for k, v in p.items() if v is not None}) + "\n" for p in rows))
    return len(rows)
