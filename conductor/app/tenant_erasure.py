"""Deleting a tenant: every row and file of it, and the checkpoints its data trained.

Gone: the tenant, its keys, jobs (exploration jobs included), chains, rounds, steps, rewards,
judgements, batches, files (rows and bytes on disk; a batch's malformed lines not yet in its error
file too), webhook deliveries with their attempts, and
the cached worker answers its steps produced. The rows go in one transaction, the files after it
commits (a failed transaction leaves every file in place; a file left behind by a crash after the
commit has no row pointing at it).

Weights are not untrained. The report names every checkpoint whose lineage holds the tenant
(`conductor.store.lineage`), so an operator can roll back past them; the checkpoints keep the
tenant's id in their lineage, which is a record of what trained them and holds none of its data.

A tenant with jobs still in flight is not deleted: its keys are revoked first (no new work can
arrive), and the command says how many jobs to cancel or wait for before it is run again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Delete, delete, func, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from conductor.app.batches.ingest import invalid_path
from conductor.domain.errors import Conflict, NotFound
from conductor.store import lineage
from conductor.store.models import (
    ApiKey,
    Batch,
    CallCacheEntry,
    Chain,
    File,
    Job,
    Judgement,
    Reward,
    Round,
    Step,
    Tenant,
    WebhookAttempt,
    WebhookDelivery,
)
from conductor.store.queries import TERMINAL


@dataclass(frozen=True)
class DeletionReport:
    tenant_id: str
    name: str
    rows: dict[str, int] = field(default_factory=dict)  #: table -> rows deleted
    files_removed: int = 0
    checkpoints: list[lineage.TrainedOn] = field(default_factory=list)  #: trained on its data

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant_id": self.tenant_id,
            "tenant": self.name,
            "deleted_rows": self.rows,
            "files_removed": self.files_removed,
            "checkpoints_trained_on_its_data": [
                {"checkpoint": c.checkpoint_id, "status": c.status, "directly": self.tenant_id in (c.own or ())}
                for c in self.checkpoints
            ],
        }


def delete_tenant(sessions: sessionmaker[Session], name: str, files_root: Path) -> DeletionReport:
    """Delete the tenant named `name` and everything of it (see the module doc); `files_root` is the
    deployment's files directory, where a batch not yet finalized keeps its malformed lines."""
    tenant_id = _revoke_keys(sessions, name)
    with sessions.begin() as s:
        live = s.scalar(select(func.count()).where(Job.tenant_id == tenant_id, Job.status.not_in(TERMINAL))) or 0
        if live:
            raise Conflict(
                f"tenant {name} has {live} jobs in flight; its keys are revoked, so cancel or wait for them "
                "and delete it again"
            )
        checkpoints = lineage.trained_by(s, tenant_id)
        paths = _file_paths(s, tenant_id)
        batches = list(s.scalars(select(Batch.id).where(Batch.tenant_id == tenant_id)))
        rows = _delete_rows(s, tenant_id)
    removed = 0
    for path in paths:
        if path.is_file():
            path.unlink()
            removed += 1
    for batch_id in batches:  # no row points at these: they are not counted as files
        invalid_path(files_root, batch_id).unlink(missing_ok=True)
    return DeletionReport(tenant_id, name, rows, removed, checkpoints)


def _revoke_keys(sessions: sessionmaker[Session], name: str) -> str:
    with sessions.begin() as s:
        tenant_id = s.scalar(select(Tenant.id).where(Tenant.name == name))
        if tenant_id is None:
            raise NotFound(f"no tenant {name}")
        s.execute(update(ApiKey).where(ApiKey.tenant_id == tenant_id).values(revoked=True))
        return tenant_id


def _file_paths(s: Session, tenant_id: str) -> list[Path]:
    return [Path(p) for p in s.scalars(select(File.path).where(_files_of(tenant_id))) if p]


def _files_of(tenant_id: str) -> ColumnElement[bool]:
    """Its uploads, and its batches' files whichever way they were written."""
    of_batches = [
        select(c).where(Batch.tenant_id == tenant_id)
        for c in (Batch.input_file_id, Batch.output_file_id, Batch.error_file_id)
    ]
    return or_(File.tenant_id == tenant_id, *(File.id.in_(q) for q in of_batches))


def _delete_rows(s: Session, tenant_id: str) -> dict[str, int]:
    """Children before parents, so every foreign key holds at each statement."""
    jobs_in = select(Job.id).where(Job.tenant_id == tenant_id)
    batches = select(Batch.id).where(Batch.tenant_id == tenant_id)
    deliveries = select(WebhookDelivery.id).where(
        or_(
            WebhookDelivery.tenant_id == tenant_id,
            WebhookDelivery.subject_id.in_(jobs_in),
            WebhookDelivery.subject_id.in_(batches),
        )
    )
    # A cached worker answer is keyed by a hash of its prompt, not by tenant: the answers its steps
    # were given are found by their text.
    cached = select(Step.output).where(Step.job_id.in_(jobs_in), Step.output.is_not(None))
    rows: dict[str, int] = {}

    def run(table: str, stmt: Delete) -> None:
        rows[table] = rows.get(table, 0) + (s.execute(stmt).rowcount or 0)  # type: ignore[attr-defined]

    run("call_cache", delete(CallCacheEntry).where(CallCacheEntry.text.in_(cached)))
    run("webhook_attempts", delete(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(deliveries)))
    run("webhook_deliveries", delete(WebhookDelivery).where(WebhookDelivery.id.in_(deliveries)))
    run("rewards", delete(Reward).where(Reward.job_id.in_(jobs_in)))
    run("judgements", delete(Judgement).where(or_(Judgement.tenant_id == tenant_id, Judgement.job_id.in_(jobs_in))))
    # Nested chains point at the steps that called them: unhook them before the steps go.
    s.execute(update(Chain).where(Chain.job_id.in_(jobs_in)).values(parent_step_id=None))
    run("steps", delete(Step).where(Step.job_id.in_(jobs_in)))
    run("rounds", delete(Round).where(Round.job_id.in_(jobs_in)))
    run("chains", delete(Chain).where(Chain.job_id.in_(jobs_in)))
    run("jobs", delete(Job).where(Job.tenant_id == tenant_id))
    run("files", delete(File).where(_files_of(tenant_id)))
    run("batches", delete(Batch).where(Batch.tenant_id == tenant_id))
    run("api_keys", delete(ApiKey).where(ApiKey.tenant_id == tenant_id))
    run("tenants", delete(Tenant).where(Tenant.id == tenant_id))
    return rows
