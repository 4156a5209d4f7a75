"""The service layer that CLI and HTTP share: submit problems and batches, read jobs, export traces."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from conductor import telemetry
from conductor.app.batches import stream as batch_stream
from conductor.app.read_models import JobDetail, ResultLine
from conductor.app.views import trace_line
from conductor.config.settings import Settings
from conductor.domain.effort import knob
from conductor.domain.errors import InputError, NotFound
from conductor.domain.inputs import read_problems
from conductor.domain.problem import Problem
from conductor.domain.states import TERMINAL_JOB, JobStatus
from conductor.store import queries
from conductor.store.models import Batch, Job, new_id

#: Starts jobs now (the Celery dispatcher's `submit` in practice).
Submit = Callable[[list[str]], None]
#: Lets waiting jobs into the broker as the cluster has room (a `schedulers.feeder.Feeder`'s `admit`).
Admit = Callable[[], object]


@dataclass(frozen=True)
class JobSpec:
    """How to run a problem: everything a job carries besides the problem itself, the same for
    one job (`Service.submit`) and for every job of a batch (`Service.submit_batch`)."""

    tenant_id: str | None = None
    samples: int | None = None  #: workflows sampled for the problem (G); None: the settings' default
    priority: int = 5  #: the feeder admits higher first (interactive API work 9, batches lower)
    options: dict[str, Any] | None = None  #: per-job overrides (see `Job.options`)
    budget_tokens: int | None = None  #: the job ends as budget_exceeded past this many tokens
    budget_usd: float | None = None  #: ... or past this cost
    webhook_url: str | None = None  #: notified when the job ends (else the tenant's, for single jobs)
    idempotency_key: str | None = None  #: one job per tenant and key: a repeat returns the first job
    explore_of: str | None = None  #: extra samples for this user job, judged as one group with it
    #: the job's trace parent when it is not the current span: the stored `traceparent` of the request
    #: that created the job's batch (its lines are read later, in a worker)
    trace_parent: str | None = None

    def with_knob(self, effort: str | None, max_usd: float | None = None) -> JobSpec:
        """This spec at an effort level (see `conductor.domain.effort`) and a maximum USD per problem.
        An unknown effort raises InputError before anything is written."""
        k = knob(effort, self.samples)
        budget = self.budget_usd if max_usd is None else min(max_usd, self.budget_usd or max_usd)
        return replace(self, options={**(self.options or {}), **k.options}, samples=k.samples, budget_usd=budget)

    def columns(self, problem: Problem, *, default_samples: int) -> dict[str, Any]:
        """The job row's columns that the problem and this spec decide."""
        return {
            "tenant_id": self.tenant_id,
            "external_id": problem.id,
            "idempotency_key": self.idempotency_key,
            "priority": self.priority,
            "problem": problem.model_dump(),
            "samples": self.samples or default_samples,
            "webhook_url": self.webhook_url,
            "options": self.options or {},
            "budget_tokens": self.budget_tokens,
            "budget_usd": self.budget_usd,
            "explore_of": self.explore_of,
            # The job's trace, a child of the submitting request's span (nothing when tracing is off).
            **telemetry.new_job_trace(self.trace_parent),
        }


@dataclass
class BatchReport:
    batch_id: str
    job_ids: list[str] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)  # {"line": n, "error": "..."}


class Service:
    """Submit and read jobs over a store. `submit` sends jobs to the broker at once; `admit` is the
    admission seam: waiting jobs enter the broker as the cluster has room, fairly across tenants."""

    def __init__(self, sessions: sessionmaker[Session], settings: Settings, *, submit: Submit, admit: Admit) -> None:
        self.sessions = sessions
        self.settings = settings
        self.submit_jobs = submit
        self.admit = admit

    # -- submit --------------------------------------------------------------------------
    def submit(self, problem: Problem, spec: JobSpec = JobSpec(), *, via_feeder: bool = False) -> tuple[str, bool]:
        """Create a job and start it; returns (job_id, created). A repeated idempotency key returns the first job.

        With `via_feeder` the job waits its turn in the feeder (tenant fair share, priority,
        back-pressure) instead of being sent to the broker at once.
        """
        self.check_size(problem)
        job = self.new_job(problem, spec)
        if via_feeder:
            job.status = JobStatus.WAITING
        try:
            with self.sessions.begin() as s:
                s.add(job)
        except IntegrityError as exc:
            if spec.idempotency_key is None:
                raise
            first = self.job_for_key(spec.tenant_id, spec.idempotency_key)
            if first is None:
                raise NotFound(f"no job with idempotency key {spec.idempotency_key!r}") from exc
            return first, False
        if via_feeder:
            self.admit()
        else:
            self.submit_jobs([job.id])
        return job.id, True

    def submit_batch(
        self,
        path: str | Path,
        spec: JobSpec = JobSpec(),
        *,
        format: str | None = None,
        limit: int | None = None,
        keep_ids: bool = True,
        chunk: int = batch_stream.CHUNK,
    ) -> BatchReport:
        """Submit every valid problem of a file, each job as `spec` says; malformed lines are
        reported by number, not fatal.

        The file is streamed and jobs are inserted `chunk` at a time as ``waiting``; the feeder
        admits them into the broker as the cluster has room (after each chunk, then whenever
        someone calls `admit()`: `wait_batch`, finalize, the reaper). With
        `keep_ids=False` no list of job ids is kept (100k-problem batches: follow them with
        `wait_batch` and `batch_result_lines`).
        """
        if spec.idempotency_key is not None:
            raise InputError("an idempotency key names one job, not every job of a batch")
        batch = Batch(id=new_id(), tenant_id=spec.tenant_id, source=str(path))
        samples = self.settings.samples

        def row(problem: Problem, line: int) -> dict[str, Any]:
            return {
                **spec.columns(problem, default_samples=samples),
                "batch_id": batch.id,
                "line_no": line,
                "status": JobStatus.WAITING,
            }

        streamed = batch_stream.insert_streaming(
            self.sessions,
            self._sized(read_problems(path, format=format)),
            batch=batch,
            job_row=row,
            limit=limit,
            chunk=chunk,
            after_chunk=self.admit,
            keep_ids=keep_ids,
        )
        return BatchReport(batch_id=batch.id, job_ids=streamed.job_ids or [], rejected=streamed.rejected)

    def check_size(self, problem: Problem) -> None:
        """InputError for a question past `max_question_chars` (a chat's whole conversation counts)."""
        limit = self.settings.max_question_chars
        if len(problem.question) > limit:
            raise InputError(
                f"the question holds {len(problem.question)} characters; at most {limit} are accepted "
                "(CONDUCTOR_MAX_QUESTION_CHARS)"
            )

    def _sized(self, items: Iterator[tuple[int, Problem | InputError]]) -> Iterator[tuple[int, Problem | InputError]]:
        """A file's problems, those too large for `check_size` turned into their line's error."""
        for number, item in items:
            if isinstance(item, Problem):
                try:
                    self.check_size(item)
                except InputError as exc:
                    yield number, InputError(f"line {number}: {exc}")
                    continue
            yield number, item

    def new_job(
        self, problem: Problem, spec: JobSpec, *, batch_id: str | None = None, line_no: int | None = None
    ) -> Job:
        """A queued job row for `problem`, not yet stored (the caller adds it in its own transaction)."""
        return Job(
            **spec.columns(problem, default_samples=self.settings.samples),
            batch_id=batch_id,
            line_no=line_no,
            status=JobStatus.QUEUED,
        )

    def job_for_key(self, tenant_id: str | None, key: str) -> str | None:
        """The job an idempotency key already created for the tenant (None: not yet)."""
        with self.sessions() as s:
            return s.scalar(
                select(Job.id).where(
                    Job.tenant_id == tenant_id,  # None compiles to IS NULL
                    Job.idempotency_key == key,
                )
            )

    # -- read ----------------------------------------------------------------------------
    def wait(
        self,
        job_ids: Iterable[str],
        *,
        timeout: float | None = None,
        poll_s: float = 0.5,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Poll the store until every job is terminal (the CLI's follow mode; no task waits on a task)."""
        ids = list(job_ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        last = -1
        while True:
            self.admit()
            with self.sessions() as s:
                done = sum(queries.count_ended(s, chunk) for chunk in _chunks(ids, 500))
            if on_progress and done != last:
                on_progress(done, len(ids))
                last = done
            if done >= len(ids):
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{len(ids) - done} of {len(ids)} jobs unfinished after {timeout}s")
            time.sleep(poll_s)

    def batch_progress(self, batch_id: str) -> tuple[int, int]:
        """(terminal jobs, all jobs) of a batch: two indexed counts, whatever its size."""
        terminal = [s.value for s in TERMINAL_JOB]
        with self.sessions() as s:
            total = s.scalar(select(func.count()).where(Job.batch_id == batch_id)) or 0
            done = s.scalar(select(func.count()).where(Job.batch_id == batch_id, Job.status.in_(terminal))) or 0
        return done, total

    def wait_batch(
        self,
        batch_id: str,
        *,
        timeout: float | None = None,
        poll_s: float = 0.5,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Admit the batch's waiting jobs as room frees and follow it until every job is terminal."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = -1
        while True:
            try:
                self.admit()
                done, total = self.batch_progress(batch_id)
            except Exception as exc:  # the follower outlives a broker or database restart
                if not _transient(exc) or (deadline is not None and time.monotonic() > deadline):
                    raise
                time.sleep(max(poll_s, 1.0))
                continue
            if on_progress and done != last:
                on_progress(done, total)
                last = done
            if done >= total:
                return
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{total - done} of {total} jobs unfinished after {timeout}s")
            time.sleep(poll_s)

    def batch_result_lines(self, batch_id: str) -> Iterator[dict[str, Any]]:
        """One result line (`ResultLine`'s JSON) per job of a batch, in line order, streamed with eager loading."""
        for job in batch_stream.iter_jobs(self.sessions, batch_id=batch_id):
            yield ResultLine.of(job).to_json()

    def job_detail(self, job_id: str) -> JobDetail:
        with self.sessions() as s:
            return JobDetail.of(queries.get_job(s, job_id), s)

    def job(self, job_id: str) -> dict[str, Any]:
        """The job's detail as JSON (`conductor status`)."""
        return self.job_detail(job_id).to_json()

    def result_lines(self, job_ids: Iterable[str]) -> Iterator[dict[str, Any]]:
        for job in batch_stream.iter_jobs(self.sessions, job_ids=job_ids):
            yield ResultLine.of(job).to_json()

    # -- traces ---------------------------------------------------------------------------
    def usage(self, *, batch_id: str | None = None, tenant_id: str | None = None) -> dict[str, Any]:
        """Jobs, tokens and cost summed over a batch, a tenant, or everything: the users' own jobs,
        and apart from them what training spends on their traffic (`exploration`, `judging`)."""
        q = select(
            Job.status,
            func.count(),
            func.coalesce(func.sum(Job.prompt_tokens), 0),
            func.coalesce(func.sum(Job.completion_tokens), 0),
            func.coalesce(func.sum(Job.cost_usd), 0.0),
            func.coalesce(func.sum(Job.model_calls), 0),
            func.coalesce(func.sum(Job.cache_hits), 0),
            func.coalesce(func.sum(Job.cached_tokens), 0),
            func.coalesce(func.sum(Job.saved_usd), 0.0),
        ).group_by(Job.status)
        if batch_id is not None:
            q = q.where(Job.batch_id == batch_id)
        if tenant_id is not None:
            q = q.where(Job.tenant_id == tenant_id)
        with self.sessions() as s:
            rows = s.execute(q.where(Job.explore_of.is_(None))).all()
            background = queries.background_usage(s, batch_id=batch_id, tenant_id=tenant_id)
        by_status = {str(status): n for status, n, *_ in rows}
        return {
            "batch_id": batch_id,
            "tenant_id": tenant_id,
            "jobs": sum(by_status.values()),
            "by_status": by_status,
            "prompt_tokens": int(sum(r[2] for r in rows)),
            "completion_tokens": int(sum(r[3] for r in rows)),
            "cost_usd": float(sum(r[4] for r in rows)),
            "model_calls": int(sum(r[5] for r in rows)),
            # Worker answers served from the deterministic-call cache: their tokens are in the totals above
            # (the work the workflows represent), their dollars are not (`saved_usd`).
            "cache": {
                "hits": int(sum(r[6] for r in rows)),
                "tokens": int(sum(r[7] for r in rows)),
                "saved_usd": float(sum(r[8] for r in rows)),
            },
            **background,
        }

    def export_traces(self, out: Path, *, include_eval: bool = False) -> int:
        """One JSONL line per Conductor round with everything a GRPO trainer needs.

        Rounds of evaluation jobs are left out unless asked for: training on the benchmark
        that gates a checkpoint would make the gate meaningless. So are the rounds of tenants
        whose traces may not train the Conductor.
        """
        with out.open("w") as fh:
            return batch_stream.write_traces(
                self.sessions,
                fh,
                trace_line,
                include_eval=include_eval,
                train_on_tenant_data=self.settings.train_on_tenant_data,
            )


def _transient(exc: Exception) -> bool:
    """A lost connection to the database or the broker (worth retrying), not a bug."""
    from sqlalchemy.exc import DBAPIError

    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated) or type(exc).__name__ in ("OperationalError", "InterfaceError")
    return type(exc).__module__.startswith(("redis", "kombu")) or isinstance(exc, ConnectionError | OSError)


def _chunks(items: list[str], n: int) -> Iterator[list[str]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]
