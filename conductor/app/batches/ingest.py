"""Reading a Batch API input file into jobs, on a worker, resumably.

The API only stores the file and the batch row (`validating`) and sends the read as a task; a
worker reads the file line by line, CHUNK lines per transaction. Each transaction writes the
chunk's jobs and moves `batches.lines_read` forward with a compare-and-set on its old value, so:

- a reader killed mid-way (its host SIGKILLed, its message lost) is resumed by beat from the last
  committed line: no line is lost and none becomes two jobs;
- two readers of the same batch (a re-send racing a slow reader) cannot both commit a chunk: the
  one that loses the compare-and-set stops.

Malformed lines go to the batch's error file. A chunk's error lines are written (and flushed to
the OS) while its transaction holds the batch row, before it commits; lines past the committed
ones (a reader killed before its commit) are ignored, and a line written twice is read once.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from conductor.app.batches.stream import Chunk, insert_streaming
from conductor.app.chat_request import batch_line_request
from conductor.app.service import JobSpec, Service
from conductor.app.tenant_jobs import conversation_question
from conductor.domain.effort import max_usd
from conductor.domain.errors import InputError
from conductor.domain.problem import Problem
from conductor.domain.states import BatchStatus, JobStatus
from conductor.domain.text import unstorable
from conductor.store.models import Batch, File, Job, utcnow

CHUNK = 500
BATCH_PRIORITY = 3  # below the default (5) and chat (9)
VALIDATING = BatchStatus.VALIDATING.value


INVALID_SUFFIX = ".invalid.jsonl"


def invalid_path(root: Path, batch_id: str) -> Path:
    """Where a batch's malformed lines are kept until its error file is written (then it is removed:
    they hold the tenant's text, a custom_id at least, and live on in the error file)."""
    return root / f"{batch_id}{INVALID_SUFFIX}"


class BatchReader:
    """Reads one batch's input file into waiting jobs (the feeder admits them)."""

    def __init__(self, service: Service, root: Path) -> None:
        self.service = service
        self.sessions = service.sessions
        self.root = root

    def read(self, batch_id: str) -> bool:
        """Read the rest of the file; False when another reader, a cancel or an earlier read got there first."""
        with self.sessions() as s:
            batch = s.get(Batch, batch_id)
            if batch is None or batch.status != VALIDATING:
                return False
            src = s.get_one(File, batch.input_file_id)
            # custom_ids must be unique within a batch: the committed lines' ids count too.
            seen = {i for i in s.scalars(select(Job.external_id).where(Job.batch_id == batch_id)) if i}
        progress = _Progress(
            done=batch.lines_read,
            valid=len(seen),
            invalid=sum(1 for _ in error_lines(invalid_path(self.root, batch_id), batch.lines_read)),
        )
        samples = self.service.settings.samples

        def job_row(request: tuple[Problem, JobSpec], line: int) -> dict[str, Any]:
            problem, spec = request
            columns = spec.columns(problem, default_samples=samples)
            return {**columns, "batch_id": batch_id, "line_no": line, "status": JobStatus.WAITING}

        items = self._requests(batch, Path(src.path), seen, progress)
        try:
            streamed = insert_streaming(
                self.sessions,
                items,
                batch=None,
                job_row=job_row,
                chunk=CHUNK,
                after_chunk=self._committed,
                guard=lambda s, chunk: self._advance(s, batch_id, chunk, progress),
            )
        finally:
            items.close()
        return not streamed.stopped

    def _requests(
        self, batch: Batch, path: Path, seen: set[str], progress: _Progress
    ) -> Generator[tuple[int, tuple[Problem, JobSpec] | InputError], None, None]:
        """The file's unread lines as requests or errors; `progress.position` is the last line read."""
        with path.open("rb") as fh:
            for line_no, raw in enumerate(fh, start=1):
                progress.position = line_no
                if line_no <= progress.done or not raw.strip():
                    continue
                try:
                    yield line_no, self._request_from_line(batch, line_no, raw, seen)
                except InputError as exc:
                    progress.custom_ids[line_no] = _custom_id(raw)
                    yield line_no, exc

    def _advance(self, s: Session, batch_id: str, chunk: Chunk, progress: _Progress) -> bool:
        """In a chunk's transaction: the lines up to the last one read become this chunk's, if nobody
        moved the batch on (cancelled, or another reader committed them)."""
        t = utcnow()
        invalid = progress.invalid + len(chunk.rejected)
        values: dict[str, Any] = {"lines_read": progress.position, "invalid_lines": invalid, "sent_at": t}
        if chunk.final:  # every line is read
            values.update(status=BatchStatus.IN_PROGRESS.value, in_progress_at=t, total=progress.valid + chunk.total)
        moved = s.execute(
            update(Batch)
            .where(Batch.id == batch_id, Batch.status == VALIDATING, Batch.lines_read == progress.done)
            .values(**values)
        )
        if rowcount(moved) != 1:
            return False
        if chunk.rejected:  # while this transaction holds the batch row: no other reader appends now
            bad = [
                {"line": r["line"], "custom_id": progress.custom_ids.pop(r["line"], None), "message": r["error"]}
                for r in chunk.rejected
            ]
            _append(invalid_path(self.root, batch_id), [json.dumps(b) for b in bad])
        progress.done, progress.invalid = progress.position, invalid
        return True

    def _committed(self) -> None:
        """After each chunk's commit: the first lines run while the rest of the file is read."""
        self.service.admit()

    def _request_from_line(self, batch: Batch, line_no: int, raw: bytes, seen: set[str]) -> tuple[Problem, JobSpec]:
        try:
            req = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"line {line_no} is not JSON: {exc}") from exc
        if not isinstance(req, dict):
            raise InputError(f"line {line_no} is not a JSON object")
        if bad := unstorable(req):
            raise InputError(f"{bad[0]} {bad[1]}; it cannot be stored")
        custom_id, method, url, body = req.get("custom_id"), req.get("method"), req.get("url"), req.get("body")
        if not isinstance(custom_id, str) or not custom_id:
            raise InputError("custom_id must be a non-empty string")
        if custom_id in seen:
            raise InputError(f"duplicate custom_id {custom_id!r}")
        if method != "POST" or url != batch.endpoint:
            raise InputError(f"method and url must be POST {batch.endpoint}")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise InputError("body must be an object with a messages list")
        question = conversation_question([m for m in body["messages"] if isinstance(m, dict)])
        options: dict[str, Any] = {"api": "batch", "model": str(body.get("model") or "conductor")}
        # `response_format`, `tools`, `tool_choice` and `stop` as the chat route reads them; a field that
        # would change the answer and cannot be honoured (or is unknown) is this line's error, never ignored.
        request = batch_line_request(body)
        if (answer_format := request.answer_format()) is not None:
            options["answer_format"] = answer_format.to_options()
        if request.stop:
            options["stop"] = request.stop
        spec = JobSpec(
            tenant_id=batch.tenant_id, priority=BATCH_PRIORITY, options=options, trace_parent=batch.traceparent
        ).with_knob(_effort_of(body), max_usd(body.get("max_usd")))
        seen.add(custom_id)
        problem = Problem(id=custom_id, question=question, kind="text")
        self.service.check_size(problem)
        return problem, spec


@dataclass
class _Progress:
    """One read's place: the committed line (`done`), the last line read, and the counts so far."""

    done: int
    valid: int
    invalid: int
    position: int = 0
    custom_ids: dict[int, str | None] = field(default_factory=dict)  # malformed lines' ids, until written

    def __post_init__(self) -> None:
        self.position = self.done


def rowcount(result: Any) -> int:
    """Rows an UPDATE changed (the compare-and-set checks)."""
    return result.rowcount if isinstance(result, CursorResult) else 0


def error_lines(path: Path, upto: int) -> Iterator[dict[str, Any]]:
    """The error records of input lines `1..upto`, in input order, each once. A reader killed
    between writing a chunk's error lines and committing it leaves them behind (cut short, maybe);
    the resumed reader writes them again after them."""
    if not path.exists():
        return
    seen: set[int] = set()
    with path.open() as fh:
        for raw in fh:
            try:
                rec = json.loads(raw)
                line = int(rec["line"])
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a kill
            if line <= upto and line not in seen:
                seen.add(line)
                yield rec


def _append(path: Path, lines: list[str]) -> None:
    """Append whole lines, after a line a killed reader may have left cut short; flushed to the OS."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as fh:
        if fh.tell() > 0:
            with path.open("rb") as tail:
                tail.seek(-1, os.SEEK_END)
                if tail.read(1) != b"\n":
                    fh.write(b"\n")
        fh.write("".join(line + "\n" for line in lines).encode())
        fh.flush()
        os.fsync(fh.fileno())


def _custom_id(raw: bytes) -> str | None:
    try:
        value = json.loads(raw).get("custom_id")
    except (ValueError, AttributeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, str) else None


def _effort_of(body: dict[str, Any]) -> str | None:
    """A line's effort: chat's `reasoning_effort`, or Responses' `reasoning.effort`."""
    reasoning = body.get("reasoning")
    effort = body.get("reasoning_effort") or (reasoning.get("effort") if isinstance(reasoning, dict) else None)
    return None if effort is None else str(effort)
