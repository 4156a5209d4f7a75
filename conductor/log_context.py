"""Which job a log line belongs to: a context variable set while a task works for a job, and the
logging filter that writes it on every record a handler formats.

The task layer binds the job (or the round or step it was sent for) around each task; the
orchestrator adds the job id once a round or step has been leased, since those tasks carry only
their own id. Code that logs needs nothing: the filter reads the variable when the record is
handled, in the thread that logged it. A Celery thread pool runs one task at a time per thread,
so the binding set in that thread is the running task's, and it is reset when the task ends.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from dataclasses import dataclass, replace

__all__ = ["JOB_LOG_FORMAT", "JobFilter", "JobLogContext", "bind", "current", "install", "job_context", "note_job"]

#: Celery's worker format with the job label after the level: `[time: INFO/MainProcess] [job=...] message`.
JOB_LOG_FORMAT = "[%(asctime)s: %(levelname)s/%(processName)s]%(job)s %(message)s"


@dataclass(frozen=True)
class JobLogContext:
    job_id: str | None = None
    round_id: int | None = None
    step_id: int | None = None

    def label(self) -> str:
        """`job=<id> round=<id> step=<id>`, naming only what is known."""
        parts = [("job", self.job_id), ("round", self.round_id), ("step", self.step_id)]
        return " ".join(f"{name}={value}" for name, value in parts if value is not None)


_current: ContextVar[JobLogContext | None] = ContextVar("conductor_job_log_context", default=None)


def current() -> JobLogContext | None:
    return _current.get()


def bind(
    *, job_id: str | None = None, round_id: int | None = None, step_id: int | None = None
) -> Token[JobLogContext | None]:
    """Start a job's binding; pass the token to `unbind` when the work ends."""
    return _current.set(JobLogContext(job_id, round_id, step_id))


def unbind(token: Token[JobLogContext | None]) -> None:
    # Also undoes every `note_job` made since `bind`: reset restores the value from before bind.
    _current.reset(token)


@contextmanager
def job_context(
    *, job_id: str | None = None, round_id: int | None = None, step_id: int | None = None
) -> Iterator[JobLogContext]:
    token = bind(job_id=job_id, round_id=round_id, step_id=step_id)
    try:
        yield _current.get() or JobLogContext()
    finally:
        unbind(token)


def note_job(job_id: str) -> None:
    """Name the job of the round or step being worked on (known once it is leased); outside a
    binding this does nothing, so no id outlives the task that learned it."""
    ctx = _current.get()
    if ctx is not None and ctx.job_id != job_id:
        _current.set(replace(ctx, job_id=job_id))


class JobFilter(logging.Filter):
    """Adds `job_id`, `round_id`, `step_id` (None outside a job) and `job` (` [job=...]` or "")
    to every record, keeping values a caller passed with `extra=`. Never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _current.get() or JobLogContext()
        for name in ("job_id", "round_id", "step_id"):
            if not hasattr(record, name):
                setattr(record, name, getattr(ctx, name))
        if not hasattr(record, "job"):
            label = JobLogContext(record.job_id, record.round_id, record.step_id).label()  # type: ignore[attr-defined]
            record.job = f" [{label}]" if label else ""
        return True


def install(handlers: Iterable[logging.Handler]) -> None:
    """Put one `JobFilter` on each handler (a handler's filters see records of every logger that
    propagates to it, which a logger's own filters would not)."""
    for handler in handlers:
        if not any(isinstance(f, JobFilter) for f in handler.filters):
            handler.addFilter(JobFilter())
