"""Which tenants' data trained each checkpoint, for an auditor and for tenant deletion.

A checkpoint trained from a dataset records the tenant ids of its rows under `data_window["tenants"]`
(synthetic data, such as the format warm-up's: an empty list). Its weights also carry whatever its
ancestors learned, so a checkpoint's full lineage is its own tenants plus its parent's lineage.
A checkpoint made before lineage was recorded has no such key: its tenants are unknown, not none.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from conductor.store.models import Checkpoint, Tenant

#: The `Checkpoint.data_window` key that holds the tenant ids of the checkpoint's own dataset.
TENANTS_KEY = "tenants"


@dataclass(frozen=True)
class TrainedOn:
    checkpoint_id: str
    status: str
    own: frozenset[str] | None  #: its own dataset's tenant ids; None: not recorded
    inherited: frozenset[str]  #: its ancestors' (recorded) tenant ids
    unknown_ancestry: bool  #: some ancestor recorded no tenants

    @property
    def tenants(self) -> frozenset[str]:
        return (self.own or frozenset()) | self.inherited


def trained_on(s: Session) -> dict[str, TrainedOn]:
    """Every checkpoint's lineage, by id."""
    rows = {c.id: c for c in s.scalars(select(Checkpoint))}

    def own(c: Checkpoint) -> frozenset[str] | None:
        ids = (c.data_window or {}).get(TENANTS_KEY)
        return frozenset(str(t) for t in ids) if isinstance(ids, list) else None

    out: dict[str, TrainedOn] = {}
    for c in rows.values():
        inherited: set[str] = set()
        unknown, seen, parent = False, {c.id}, c.parent_id
        while parent and parent in rows and parent not in seen:
            seen.add(parent)
            recorded = own(rows[parent])
            unknown |= recorded is None
            inherited |= recorded or set()
            parent = rows[parent].parent_id
        out[c.id] = TrainedOn(c.id, c.status, own(c), frozenset(inherited), unknown)
    return out


def trained_by(s: Session, tenant_id: str) -> list[TrainedOn]:
    """The checkpoints whose weights learned from this tenant's data, itself or through an ancestor."""
    return sorted((t for t in trained_on(s).values() if tenant_id in t.tenants), key=lambda t: t.checkpoint_id)


def tenant_names(s: Session, ids: frozenset[str]) -> dict[str, str]:
    """Names of the tenants that still exist (a deleted tenant is known by its id alone)."""
    if not ids:
        return {}
    return {tid: name for tid, name in s.execute(select(Tenant.id, Tenant.name).where(Tenant.id.in_(sorted(ids))))}
