"""Retention: the texts of ended jobs older than `retention_days` are removed; their numbers stay.

Removed, per job: the question and reference (the problem becomes a placeholder question and its
kind), answers and errors of the job, its chains, rounds and steps, the Conductor's prompts and
completions (token ids and logprobs are the same text in other form), the workflows' subtasks
(their workers and access lists stay), step outputs, the texts verifiers and judges left in
reward details, judgement errors, the Responses API's instructions and metadata, the caller's own
identifiers and addresses (a Batch line's `custom_id`, a problem's id, the job's webhook URL), and the
webhook deliveries about the job. Per batch older than the cutoff whose jobs have all ended: its
metadata and the messages of its malformed lines (their line numbers stay). Across the store: files
(rows and bytes on disk, and the malformed lines of ended batches a finalize left behind), webhook
deliveries and cached worker answers older than the cutoff. Kept: every count, token number, cost,
latency, status and reward value, so `conductor usage` and `/metrics` read the same afterwards.

A job is done once (`Job.texts_removed_at`), a bounded number per run, so beat's task stays short
and a backlog is worked off run by run. Jobs still in flight and batches still running (and their
files) are left alone whatever their age. A tenant's webhook URL is the tenant's setting, not traffic:
it stays until the tenant is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import delete, exists, null, select, update
from sqlalchemy.orm import Session, sessionmaker

from conductor.app.batches.ingest import INVALID_SUFFIX
from conductor.config.settings import Settings
from conductor.domain.states import TERMINAL_BATCH
from conductor.store.models import (
    Batch,
    CallCacheEntry,
    Chain,
    File,
    Job,
    Judgement,
    Reward,
    Round,
    Step,
    WebhookAttempt,
    WebhookDelivery,
)
from conductor.store.queries import TERMINAL

#: What a removed text reads as where the column cannot be empty.
REMOVED = "[removed by retention]"
#: Job options a caller wrote in their own words (the Responses API's; a chat request's stop sequences).
USER_TEXT_OPTIONS = ("instructions", "metadata", "stop")


@dataclass(frozen=True)
class RetentionReport:
    jobs: int = 0
    files: int = 0
    webhook_deliveries: int = 0
    cached_answers: int = 0


def run_retention(
    sessions: sessionmaker[Session], settings: Settings, *, days: float | None = None, now: datetime | None = None
) -> RetentionReport:
    """Apply a retention of `days` (beat's `retention_days`, sent with its task), else the deployment's
    `retention_days`; nothing when neither is set."""
    days = days if days is not None else settings.retention_days
    if days is None:
        return RetentionReport()
    cutoff = (now or datetime.now(UTC)) - timedelta(days=days)
    return remove_texts_before(sessions, cutoff, settings.files_path)


def remove_texts_before(
    sessions: sessionmaker[Session], cutoff: datetime, files_root: Path, *, chunk: int = 200, max_jobs: int = 10_000
) -> RetentionReport:
    jobs = deliveries = 0
    while jobs < max_jobs:
        with sessions.begin() as s:
            ids = list(
                s.scalars(
                    select(Job.id)
                    .where(Job.created_at < cutoff, Job.texts_removed_at.is_(None), Job.status.in_(TERMINAL))
                    .limit(chunk)
                )
            )
            if not ids:
                break
            deliveries += _strip_jobs(s, ids)
        jobs += len(ids)
    with sessions.begin() as s:
        _strip_batches(s, cutoff)
        deliveries += _delete_deliveries(s, WebhookDelivery.created_at < cutoff)
        cached = s.execute(delete(CallCacheEntry).where(CallCacheEntry.created_at < cutoff)).rowcount  # type: ignore[attr-defined]
        paths = _delete_files(s, cutoff) + _leftover_invalid_lines(s, files_root, cutoff)
    for path in paths:
        path.unlink(missing_ok=True)
    return RetentionReport(jobs, len(paths), deliveries, cached or 0)


def _strip_jobs(s: Session, ids: list[str]) -> int:
    """Remove the texts of these jobs; returns how many webhook deliveries about them went."""
    for job in s.scalars(select(Job).where(Job.id.in_(ids))):
        kind = (job.problem or {}).get("kind")
        job.problem = {"question": REMOVED, **({"kind": kind} if kind else {})}
        job.options = {k: v for k, v in (job.options or {}).items() if k not in USER_TEXT_OPTIONS}
        job.answer, job.error, job.texts_removed_at = None, None, datetime.now(UTC)
        job.external_id, job.webhook_url = None, None  # the caller's words too: a custom_id, a URL with a token
    s.execute(update(Chain).where(Chain.job_id.in_(ids)).values(question=REMOVED, answer=None, error=None))
    for rnd in s.scalars(select(Round).where(Round.job_id.in_(ids), Round.workflow.is_not(None))):
        rnd.workflow = _without_subtasks(rnd.workflow or {})
    s.execute(
        update(Round)
        .where(Round.job_id.in_(ids))
        .values(
            prompt_messages=null(),
            prompt_token_ids=null(),
            completion_text=None,
            completion_token_ids=null(),
            completion_logprobs=null(),
            parse_error=None,
            answer=None,
            error=None,
        )
    )
    s.execute(update(Step).where(Step.job_id.in_(ids)).values(subtask=REMOVED, output=None, error=None))
    for reward in s.scalars(select(Reward).where(Reward.job_id.in_(ids))):
        reward.details = _numbers_only(reward.details or {})
    s.execute(update(Judgement).where(Judgement.job_id.in_(ids)).values(error=None))
    return _delete_deliveries(s, WebhookDelivery.subject_id.in_(ids))


def _strip_batches(s: Session, cutoff: datetime) -> None:
    """Metadata and malformed-line messages of old batches none of whose jobs is still in flight (a
    Batch API batch also ended): a message can quote the line (`duplicate custom_id '...'`)."""
    ended = [st.value for st in TERMINAL_BATCH]
    in_flight = exists().where(Job.batch_id == Batch.id, Job.status.not_in(TERMINAL))
    old = select(Batch).where(Batch.created_at < cutoff, (Batch.status.is_(None)) | Batch.status.in_(ended), ~in_flight)
    for batch in s.scalars(old):
        if batch.meta is not None:
            batch.meta = None
        if any(set(r) - {"line"} for r in batch.rejected or []):
            batch.rejected = [{"line": r.get("line")} for r in batch.rejected]


def _without_subtasks(workflow: dict[str, Any]) -> dict[str, Any]:
    subtasks = workflow.get("subtasks")
    return {**workflow, "subtasks": [REMOVED] * len(subtasks)} if isinstance(subtasks, list) else workflow


def _numbers_only(details: dict[str, Any]) -> dict[str, Any]:
    """A reward's numbers and flags (what training reads: `failed`) and its `kind`; no quoted text."""
    return {k: v for k, v in details.items() if k == "kind" or v is None or isinstance(v, bool | int | float)}


def _delete_deliveries(s: Session, where: Any) -> int:
    ids = select(WebhookDelivery.id).where(where)
    s.execute(delete(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(ids)))
    return int(s.execute(delete(WebhookDelivery).where(WebhookDelivery.id.in_(ids))).rowcount or 0)  # type: ignore[attr-defined]


def _leftover_invalid_lines(s: Session, root: Path, cutoff: datetime) -> list[Path]:
    """Files of a batch's malformed lines last written before the cutoff whose batch has ended (or is
    gone): finalizing removes them once their lines are in the error file, but a finalize killed
    after its commit, or a deployment older than that, leaves them (with a custom_id or more)."""
    old = {
        path.name.removesuffix(INVALID_SUFFIX): path
        for path in root.glob(f"*{INVALID_SUFFIX}")
        if path.stat().st_mtime < cutoff.timestamp()
    }
    if not old:
        return []
    ended = [st.value for st in TERMINAL_BATCH]
    running = set(s.scalars(select(Batch.id).where(Batch.id.in_(old), Batch.status.not_in(ended))))
    return [path for batch_id, path in old.items() if batch_id not in running]


def _delete_files(s: Session, cutoff: datetime) -> list[Path]:
    ended = [st.value for st in TERMINAL_BATCH]
    in_use = select(Batch.input_file_id).where(Batch.status.is_not(None), Batch.status.not_in(ended))
    old = select(File).where(File.created_at < cutoff, File.id.not_in(in_use.where(Batch.input_file_id.is_not(None))))
    rows = list(s.scalars(old))
    for row in rows:
        s.delete(row)
    return [Path(r.path) for r in rows if r.path]
