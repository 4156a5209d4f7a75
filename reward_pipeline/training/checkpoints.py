"""The checkpoint registry: every adapter is a row (parent, stage, dataset window, config, metrics,
gate decision) with its files on disk; exactly one row is `active`, and promotion or rollback is
one transaction that every process observes (the gateway reads the active row with a short cache)."""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from conductor.domain.errors import NotFound, TrainingError
from conductor.store import lineage
from conductor.store.models import Checkpoint

#: Stages whose checkpoints start a run from the base model (a warm-up, a soup of warm-ups); a run gates the
#: newest candidate of these against the base.
STARTING_STAGES = ("warmup", "soup")


class CheckpointStatus:
    CANDIDATE = "candidate"
    ACTIVE = "active"
    REJECTED = "rejected"
    RETIRED = "retired"
    #: the adapter the pool ships: it serves while no checkpoint is active, and training starts from it
    SHIPPED = "shipped"


@dataclass(frozen=True)
class CheckpointView:
    id: str
    parent_id: str | None
    stage: str | None
    status: str
    path: str | None
    base_model: str
    created_at: datetime
    promoted_at: datetime | None
    metrics: dict[str, Any]
    gate: dict[str, Any] | None
    config: dict[str, Any] | None
    data_window: dict[str, Any]

    @classmethod
    def of(cls, c: Checkpoint) -> CheckpointView:
        return cls(
            c.id, c.parent_id, c.stage, c.status, c.path, c.base_model, c.created_at, c.promoted_at,
            dict(c.metrics or {}), c.gate, c.config, dict(c.data_window or {}),
        )  # fmt: skip


def files_digest(path: Path) -> str:
    """sha256 over the adapter's files (names and bytes), to tie a row to what is on disk."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("_")):
        h.update(f.relative_to(path).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


class Registry:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def new_id(self, stage: str) -> str:
        return f"{stage}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S-%f')}"

    def add(
        self,
        *,
        id: str,
        parent_id: str | None,
        stage: str,
        base_model: str,
        path: Path,
        config: dict[str, Any] | None,
        metrics: dict[str, Any],
        data_window: dict[str, Any],
        status: str = CheckpointStatus.CANDIDATE,
        gate: dict[str, Any] | None = None,
    ) -> CheckpointView:
        with self.sessions.begin() as s:
            row = Checkpoint(
                id=id, parent_id=parent_id, stage=stage, base_model=base_model, path=str(path),
                config=config, metrics={**metrics, "files_sha256": files_digest(path)},
                data_window=data_window, status=status, gate=gate,
            )  # fmt: skip
            s.add(row)
            s.flush()
            return CheckpointView.of(row)

    def add_shipped(self, *, id: str, path: Path, record: dict[str, Any]) -> CheckpointView:
        """The pool's own adapter as a row (once), so that a checkpoint trained from it has a parent that lineage,
        export and rollback can reach. `record`: its exported record's entry for it (stage, config, metrics,
        gate, data window); the row's `files_sha256` ties it to the files that are there now."""
        with contextlib.suppress(NotFound):
            return self.get(id)
        return self.add(
            id=id, parent_id=None, stage=record.get("stage") or "shipped", base_model=record.get("base_model") or "",
            path=path, config=record.get("config"), metrics=record.get("metrics") or {},
            data_window=record.get("data_window") or {}, status=CheckpointStatus.SHIPPED, gate=record.get("gate"),
        )  # fmt: skip

    def get(self, checkpoint_id: str) -> CheckpointView:
        with self.sessions() as s:
            row = s.get(Checkpoint, checkpoint_id)
            if row is None:
                raise NotFound(f"no checkpoint {checkpoint_id!r}")
            return CheckpointView.of(row)

    def list(self) -> list[CheckpointView]:
        with self.sessions() as s:
            return [CheckpointView.of(c) for c in s.scalars(select(Checkpoint).order_by(Checkpoint.created_at))]

    def active(self) -> CheckpointView | None:
        with self.sessions() as s:
            row = s.scalars(select(Checkpoint).where(Checkpoint.status == CheckpointStatus.ACTIVE)).first()
            return CheckpointView.of(row) if row else None

    def record_gate(self, checkpoint_id: str, gate: dict[str, Any]) -> None:
        with self.sessions.begin() as s:
            row = s.get(Checkpoint, checkpoint_id)
            if row is None:
                raise NotFound(f"no checkpoint {checkpoint_id!r}")
            row.gate = gate
            if not gate.get("passed"):
                row.status = CheckpointStatus.REJECTED

    def promote(self, checkpoint_id: str) -> CheckpointView:
        """Make `checkpoint_id` the one active policy (the previous active one is retired)."""
        with self.sessions.begin() as s:
            row = s.get(Checkpoint, checkpoint_id, with_for_update=True)
            if row is None:
                raise NotFound(f"no checkpoint {checkpoint_id!r}")
            if not row.path or not Path(row.path).exists():
                raise TrainingError(f"checkpoint {checkpoint_id} has no files at {row.path}")
            s.execute(
                update(Checkpoint)
                .where(Checkpoint.status == CheckpointStatus.ACTIVE, Checkpoint.id != checkpoint_id)
                .values(status=CheckpointStatus.RETIRED)
            )
            row.status = CheckpointStatus.ACTIVE
            row.promoted_at = datetime.now(UTC)
            s.flush()
            return CheckpointView.of(row)

    def rollback(self) -> CheckpointView | None:
        """Re-activate the active checkpoint's parent (None: back to the pool's own Conductor, which is also
        where a checkpoint trained from the pool's shipped adapter rolls back to)."""
        current = self.active()
        if current is None:
            raise TrainingError("no active checkpoint to roll back from")
        if current.parent_id and self.get(current.parent_id).status != CheckpointStatus.SHIPPED:
            return self.promote(current.parent_id)
        with self.sessions.begin() as s:
            s.execute(update(Checkpoint).where(Checkpoint.id == current.id).values(status=CheckpointStatus.RETIRED))
        return None


def trained_on_tenants(sessions: sessionmaker[Session]) -> dict[str, dict[str, Any]]:
    """Per checkpoint, the tenants whose data trained it, by name (`id (deleted)` once a tenant is gone):
    `own` (its dataset; None where it recorded none), `tenants` (with its ancestors'), and `complete`
    (False where it or an ancestor was trained before lineage was recorded: more may have)."""
    with sessions() as s:
        found = lineage.trained_on(s)
        names = lineage.tenant_names(s, frozenset(t for c in found.values() for t in c.tenants))

    def named(ids: frozenset[str] | None) -> list[str] | None:
        return None if ids is None else sorted(names.get(t, f"{t} (deleted)") for t in ids)

    return {
        cid: {
            "own": named(c.own),
            "tenants": named(c.tenants),
            "complete": c.own is not None and not c.unknown_ancestry,
        }
        for cid, c in found.items()
    }
