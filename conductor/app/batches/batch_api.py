"""Files and OpenAI-style batches: uploads streamed to disk, input files read line by line into
jobs, and output/error files written in input order once every job has ended. Nothing here holds
a whole file in memory: lines are read, validated and inserted in chunks.

The API process only stores the file and the batch row and sends the read to a worker
(`ingest`); beat's batch sweep (`sweep`) expires batches, claims finished ones for a worker
to write their files (`finalize`), and re-sends a read or a finalize whose worker or message was
lost, under the reaper's backoff (`ResendPolicy`). An API restart loses nothing.
"""

from __future__ import annotations

import heapq
import json
import logging
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from conductor import telemetry
from conductor.app.batches.ingest import CHUNK, BatchReader, error_lines, invalid_path, rowcount
from conductor.app.batches.sweep import BatchSweep
from conductor.app.openai_shapes import batch_usage, chat_completion, job_workflows
from conductor.app.service import Service
from conductor.app.tenants import check_quota, owned
from conductor.config.settings import Settings
from conductor.domain.errors import AnswerFormatError, Conflict, InputError, NotFound
from conductor.domain.resend import ResendPolicy
from conductor.domain.states import TERMINAL_JOB_VALUES, BatchStatus, JobStatus
from conductor.domain.text import flaw
from conductor.engine.cancel import cancel_jobs
from conductor.store.models import Batch, File, Job, utcnow

log = logging.getLogger(__name__)

ENDPOINT = "/v1/chat/completions"
READ, FINALIZE = "read", "finalize"
#: How batch work reaches a worker: send(READ or FINALIZE, batch_id) (`tasks.batches.send_batch_work`).
BatchSend = Callable[[str, str], None]


def _aware(t: datetime | None) -> datetime | None:
    return None if t is None else (t if t.tzinfo else t.replace(tzinfo=UTC))


@dataclass
class Counts:
    total: int
    completed: int
    failed: int
    usage: dict[str, Any]


class Batches:
    """Files API and Batch API semantics over the Service's store and submitter."""

    def __init__(self, service: Service, send: BatchSend | None = None) -> None:
        self.service = service
        self.sessions = service.sessions
        self.root: Path = service.settings.files_path
        self.send = send

    # -- files -------------------------------------------------------------------------------
    def save_file(self, tenant_id: str | None, filename: str, purpose: str, chunks: Iterable[bytes]) -> File:
        if problem := flaw(filename):
            raise InputError(f"the filename {problem}; it cannot be stored")
        file_id = "file-" + secrets.token_hex(12)
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / file_id
        try:
            size = self._store_upload(path, chunks, purpose)
            row = File(
                id=file_id, tenant_id=tenant_id, purpose=purpose, filename=filename[:300], bytes=size, path=str(path)
            )
            with self.sessions.begin() as s:
                s.add(row)
        except BaseException:
            # Too many lines, the client gone mid-upload, or the store unreachable for the row: no
            # bytes stay behind without their row. (A commit whose answer was lost may have stored
            # the row all the same; `create` refuses such a file, its bytes being gone.)
            path.unlink(missing_ok=True)
            raise
        return row

    def _store_upload(self, path: Path, chunks: Iterable[bytes], purpose: str) -> int:
        """Copy the upload to `path`; its size in bytes."""
        size = lines = 0
        last = b"\n"
        with path.open("wb") as fh:
            for chunk in chunks:
                fh.write(chunk)
                size += len(chunk)
                lines += chunk.count(b"\n")
                last = chunk[-1:] or last
        lines += last != b"\n"  # a last line without its newline
        limit = self.service.settings.max_batch_lines
        if purpose == "batch" and lines > limit:
            raise InputError(
                f"a batch input file may hold at most {limit} lines (CONDUCTOR_MAX_BATCH_LINES); this one holds {lines}"
            )
        return size

    def file(self, tenant_id: str, file_id: str) -> File:
        with self.sessions() as s:
            return owned(s, File, file_id, tenant_id, "file")

    # -- batches -----------------------------------------------------------------------------
    def create(
        self, tenant_id: str, input_file_id: str, *, endpoint: str, window: str, metadata: dict[str, str] | None
    ) -> Batch:
        src = self.file(tenant_id, input_file_id)
        if src.purpose != "batch":
            raise InputError(f"file {input_file_id} has purpose {src.purpose!r}, not 'batch'")
        if not Path(src.path).exists():
            raise NotFound(f"file {input_file_id} was not stored completely; upload it again")
        check_quota(self.sessions, tenant_id)
        t = utcnow()
        batch = Batch(
            id="batch_" + secrets.token_hex(12),
            tenant_id=tenant_id,
            source=input_file_id,
            status=BatchStatus.VALIDATING.value,
            endpoint=endpoint,
            completion_window=window,
            input_file_id=input_file_id,
            meta=metadata,
            created_at=t,
            expires_at=t + timedelta(hours=24),
            # The creating request's span (its caller's `traceparent`): the lines' jobs become its children.
            traceparent=telemetry.current_traceparent(),
        )
        with self.sessions.begin() as s:
            s.add(batch)
        if self.send is not None:
            # Lost before a worker takes it (this process killed now, the broker away)? Beat's
            # sweep sends it again once overdue: the batch row says what is left to do.
            try:
                self.send(READ, batch.id)
            except Exception:
                # The broker did not take it (a partition, a restart). The batch is stored, so the
                # client is told it was created, as it was: an error here would have it create the
                # batch a second time. The sweep sends the read once `ready_grace_s` has passed.
                log.warning(
                    "batch %s: its read was not sent now; the batch sweep will send it", batch.id, exc_info=True
                )
        return batch

    def ingest(self, batch_id: str) -> bool:
        """Read the input file into jobs (a worker's task; resumable: see `BatchReader`)."""
        return BatchReader(self.service, self.root).read(batch_id)

    # -- read --------------------------------------------------------------------------------
    def get(self, tenant_id: str, batch_id: str) -> dict[str, Any]:
        with self.sessions() as s:
            batch = owned(s, Batch, batch_id, tenant_id, "batch")
            if batch.status is None:  # a CLI batch (`conductor run`): not a Batch API object
                raise NotFound(f"no batch {batch_id}")
            return self.view(batch, self.counts(batch_id, batch.invalid_lines))

    def list_page(self, tenant_id: str, *, after: str | None, limit: int) -> tuple[list[dict[str, Any]], bool]:
        q = select(Batch).where(Batch.tenant_id == tenant_id, Batch.status.is_not(None))
        with self.sessions() as s:
            if after:
                anchor = owned(s, Batch, after, tenant_id, "batch")
                q = q.where(
                    (Batch.created_at < anchor.created_at)
                    | ((Batch.created_at == anchor.created_at) & (Batch.id < anchor.id))
                )
            rows = list(s.scalars(q.order_by(Batch.created_at.desc(), Batch.id.desc()).limit(limit + 1)))
            return [self.view(b, self.counts(b.id, b.invalid_lines)) for b in rows[:limit]], len(rows) > limit

    def counts(self, batch_id: str, invalid: int) -> Counts:
        with self.sessions() as s:
            by_status = dict(
                s.execute(select(Job.status, func.count()).where(Job.batch_id == batch_id).group_by(Job.status)).all()
            )
            usage = batch_usage(s, batch_id)
        done = by_status.get(JobStatus.DONE, 0) + by_status.get(JobStatus.BUDGET_EXCEEDED, 0)
        ended = sum(n for st, n in by_status.items() if st in TERMINAL_JOB_VALUES)
        return Counts(
            total=sum(by_status.values()) + invalid, completed=done, failed=ended - done + invalid, usage=usage
        )

    @staticmethod
    def view(b: Batch, counts: Counts) -> dict[str, Any]:
        def ts(t: datetime | None) -> int | None:
            t = _aware(t)
            return None if t is None else int(t.timestamp())

        return {
            "id": b.id,
            "object": "batch",
            "endpoint": b.endpoint,
            "errors": b.errors,
            "input_file_id": b.input_file_id,
            "completion_window": b.completion_window,
            "status": b.status,
            "output_file_id": b.output_file_id,
            "error_file_id": b.error_file_id,
            "created_at": ts(b.created_at) or 0,
            "in_progress_at": ts(b.in_progress_at),
            "expires_at": ts(b.expires_at),
            "finalizing_at": ts(b.finalizing_at),
            "completed_at": ts(b.completed_at),
            "failed_at": ts(b.failed_at),
            "expired_at": ts(b.expired_at),
            "cancelling_at": ts(b.cancelling_at),
            "cancelled_at": ts(b.cancelled_at),
            "request_counts": {"total": counts.total, "completed": counts.completed, "failed": counts.failed},
            "metadata": b.meta,
            "usage": counts.usage,
        }

    # -- change ------------------------------------------------------------------------------
    def cancel(self, tenant_id: str, batch_id: str) -> dict[str, Any]:
        self.get(tenant_id, batch_id)  # 404 for another tenant's batch
        with self.sessions.begin() as s:
            moved = rowcount(
                s.execute(
                    update(Batch)
                    .where(
                        Batch.id == batch_id,
                        Batch.status.in_([BatchStatus.VALIDATING.value, BatchStatus.IN_PROGRESS.value]),
                    )
                    .values(status=BatchStatus.CANCELLING.value, cancelling_at=utcnow())
                )
            )
        if not moved:
            seen = self.get(tenant_id, batch_id)
            # A repeated cancel answers like the first, also once the sweeper is finalizing that cancel.
            if seen["cancelling_at"] is None:
                raise Conflict(
                    f"batch {batch_id} is {seen['status']}; only a validating or in-progress batch can be cancelled"
                )
        self.cancel_open_jobs(batch_id)
        return self.get(tenant_id, batch_id)

    def cancel_open_jobs(self, batch_id: str) -> None:
        while True:
            with self.sessions() as s:
                ids = list(
                    s.scalars(
                        select(Job.id)
                        .where(Job.batch_id == batch_id, Job.status.not_in(TERMINAL_JOB_VALUES))
                        .limit(CHUNK)
                    )
                )
            if not ids:
                return
            cancel_jobs(self.sessions, ids)

    def sweep(self, waiting: set[str] | None = None) -> list[tuple[str, str]]:
        """Beat's part: expire, claim finished batches, re-send lost reads and finalizes (`BatchSweep`)."""
        sent = BatchSweep(self, ResendPolicy(self.settings.ready_grace_s, self.settings.resend_max_interval_s)).run(
            waiting
        )
        if self.send is not None:
            for kind, batch_id in sent:
                self.send(kind, batch_id)
        return sent

    @property
    def settings(self) -> Settings:
        return self.service.settings

    def unfinished(self, batch_id: str) -> int:
        with self.sessions() as s:
            return (
                s.scalar(select(func.count()).where(Job.batch_id == batch_id, Job.status.not_in(TERMINAL_JOB_VALUES)))
                or 0
            )

    def finalize(self, batch_id: str) -> bool:
        """Write the output and error files (input order) of a batch claimed for it (`finalizing`) and
        close it; False if it is not (or no longer) finalizing. Safe to run again after a kill: the
        outcome is read from the row (cancelled if a cancel was asked, expired if the window had
        run out when it was claimed), and the files are written anew."""
        with self.sessions() as s:
            batch = s.get(Batch, batch_id)
            if batch is None or batch.status != BatchStatus.FINALIZING.value:
                return False
            expires, claimed = _aware(batch.expires_at), _aware(batch.finalizing_at)
            cancelled = batch.cancelling_at is not None
        expired = expires is not None and claimed is not None and expires <= claimed
        reason = "batch_cancelled" if cancelled else "batch_expired" if expired else None
        out = self._write(batch_id, "output", (line for line, ok, rec in self._records(batch_id, reason) if ok))
        err = self._write(batch_id, "error", (line for line, ok, rec in self._records(batch_id, reason) if not ok))
        final = {
            "batch_cancelled": (BatchStatus.CANCELLED, "cancelled_at"),
            "batch_expired": (BatchStatus.EXPIRED, "expired_at"),
            None: (BatchStatus.COMPLETED, "completed_at"),
        }[reason]
        with self.sessions.begin() as s:
            closed = s.execute(
                update(Batch)
                .where(Batch.id == batch_id, Batch.status == BatchStatus.FINALIZING.value)
                .values(status=final[0].value, output_file_id=out, error_file_id=err, **{final[1]: utcnow()})
            )
        if rowcount(closed) != 1:
            return False
        invalid_path(self.root, batch_id).unlink(missing_ok=True)  # its lines are in the error file now
        return True

    def _records(self, batch_id: str, reason: str | None) -> Iterator[tuple[str, bool, dict[str, Any]]]:
        """(json line, is-success, record) for every input line, in input order."""
        return heapq.merge(self._job_records(batch_id, reason), self._invalid_records(batch_id), key=_line_of)

    def _invalid_records(self, batch_id: str) -> Iterator[tuple[str, bool, dict[str, Any]]]:
        with self.sessions() as s:
            upto = s.scalar(select(Batch.lines_read).where(Batch.id == batch_id)) or 0
        for bad in error_lines(invalid_path(self.root, batch_id), upto):
            rec = {
                "id": f"batch_req_{batch_id[6:]}_{bad['line']}",
                "custom_id": bad["custom_id"],
                "response": None,
                "error": {"code": "invalid_request", "message": f"line {bad['line']}: {bad['message']}"},
                "line": bad["line"],
            }
            yield json.dumps(_public(rec)), False, rec

    def _job_records(self, batch_id: str, reason: str | None) -> Iterator[tuple[str, bool, dict[str, Any]]]:
        last = 0
        while True:
            with self.sessions() as s:
                jobs = list(
                    s.scalars(
                        select(Job)
                        .where(Job.batch_id == batch_id, Job.line_no > last)
                        .order_by(Job.line_no)
                        .limit(CHUNK)
                    )
                )
                if not jobs:
                    return
                workflows = job_workflows(s, [j.id for j in jobs])
            for job in jobs:
                last = job.line_no or last
                yield self._job_record(job, workflows[job.id], reason)

    @staticmethod
    def _job_record(job: Job, workflows: list[dict[str, Any]], reason: str | None) -> tuple[str, bool, dict[str, Any]]:
        rec: dict[str, Any] = {"id": f"batch_req_{job.id}", "custom_id": job.external_id, "line": job.line_no}
        ok = job.status in (JobStatus.DONE.value, JobStatus.BUDGET_EXCEEDED.value)
        if ok:
            try:
                body = chat_completion(job, workflows, (job.options or {}).get("model", "conductor"))
                rec.update(response={"status_code": 200, "request_id": job.id, "body": body}, error=None)
            except AnswerFormatError as exc:  # e.g. a budget-stopped job's partial answer: not the format asked
                ok = False
                error = {"message": f"job {job.id}: {exc}", "type": "server_error", "code": "answer_format"}
                rec.update(response={"status_code": 502, "request_id": job.id, "body": {"error": error}}, error=None)
        elif job.status == JobStatus.CANCELLED.value:
            rec.update(response=None, error={"code": reason or "cancelled", "message": job.error or "cancelled"})
        else:
            rec.update(
                response={
                    "status_code": 500,
                    "request_id": job.id,
                    "body": {"error": {"message": job.error or job.status, "type": job.status}},
                },
                error=None,
            )
        return json.dumps(_public(rec)), ok, rec

    def _write(self, batch_id: str, kind: str, lines: Iterator[str]) -> str | None:
        first = next(lines, None)
        if first is None:
            return None

        def chunks() -> Iterator[bytes]:
            yield (first + "\n").encode()
            for line in lines:
                yield (line + "\n").encode()

        tenant = self._tenant_of(batch_id)
        return self.save_file(tenant, f"{batch_id}_{kind}.jsonl", "batch_output", chunks()).id

    def _tenant_of(self, batch_id: str) -> str | None:
        with self.sessions() as s:
            return s.scalar(select(Batch.tenant_id).where(Batch.id == batch_id))


def _line_of(item: tuple[str, bool, dict[str, Any]]) -> int:
    return int(item[2]["line"] or 0)


def _public(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k != "line"}
