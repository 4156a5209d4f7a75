"""What the job explorer (`/ui`) reads: batches with progress and ETA, jobs filtered and paged,
one job with every chain, round and step, and the checkpoint lineage. Everything is seen through a
`Viewer`: a tenant sees only its own rows (another tenant's are not found), an admin sees all."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import String, cast, func, or_, select
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.sql import Select

from conductor.app.read_models import JobDetail, JobSummary
from conductor.app.tenant_jobs import JobPage, page_of_jobs
from conductor.domain.errors import NotFound
from conductor.domain.states import TERMINAL_JOB_VALUES
from conductor.store.models import Batch, Checkpoint, Job, Tenant, TrainingCycle

#: The fields of a problem that are its reference (what a verifier scores against).
REFERENCE_FIELDS = ("answer", "choices", "tests", "entry_point", "rubric")


@dataclass(frozen=True)
class Viewer:
    """Who is looking: one tenant, or an admin (every tenant, and jobs submitted without one)."""

    tenant_id: str
    admin: bool = False


def _aware(t: datetime | None) -> datetime | None:
    return None if t is None else (t if t.tzinfo else t.replace(tzinfo=UTC))


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def eta_seconds(total: int, ended: int, started_at: datetime | None, now: datetime) -> float | None:
    """Seconds until the last job ends at the rate jobs have ended so far (None before the first)."""
    started_at = _aware(started_at)
    if started_at is None or ended == 0 or ended >= total:
        return None if ended < total else 0.0
    rate = ended / max((now - started_at).total_seconds(), 1e-6)
    return (total - ended) / rate


class Explorer:
    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def _scoped(self, q: Select[Any], model: type[Job] | type[Batch], viewer: Viewer) -> Select[Any]:
        return q if viewer.admin else q.where(model.tenant_id == viewer.tenant_id)

    # -- batches -----------------------------------------------------------------------------
    def batches(self, viewer: Viewer, limit: int = 50) -> list[dict[str, Any]]:
        """Newest first: counts of jobs by status, tokens, cost, progress and ETA."""
        now = datetime.now(UTC)
        with self.sessions() as s:
            rows = list(
                s.scalars(self._scoped(select(Batch), Batch, viewer).order_by(Batch.created_at.desc()).limit(limit))
            )
            if not rows:
                return []
            ids = [b.id for b in rows]
            per_status = s.execute(
                select(
                    Job.batch_id,
                    Job.status,
                    func.count(),
                    func.coalesce(func.sum(Job.prompt_tokens + Job.completion_tokens), 0),
                    func.coalesce(func.sum(Job.cost_usd), 0.0),
                    func.min(Job.started_at),
                )
                .where(Job.batch_id.in_(ids))
                .group_by(Job.batch_id, Job.status)
            ).all()
            tenants = dict(s.execute(select(Tenant.id, Tenant.name)).all()) if viewer.admin else {}
            out = []
            for b in rows:
                mine = [r for r in per_status if r[0] == b.id]
                counts = {str(r[1]): int(r[2]) for r in mine}
                jobs = sum(counts.values())
                ended = sum(n for st, n in counts.items() if st in TERMINAL_JOB_VALUES)
                starts = [t for t in (_aware(r[5]) for r in mine) if t is not None]
                first = min(starts) if starts else _aware(b.in_progress_at or b.created_at)
                total = max(b.total, jobs)
                out.append(
                    {
                        "id": b.id,
                        "tenant": tenants.get(b.tenant_id or "", b.tenant_id),
                        "source": b.source,
                        "status": b.status or ("done" if total and ended >= total else "running"),
                        "total": total,
                        "ended": ended,
                        "progress": ended / total if total else 1.0,
                        "counts": dict(sorted(counts.items())),
                        "invalid_lines": b.invalid_lines + len(b.rejected or []),
                        "tokens": int(sum(r[3] for r in mine)),
                        "cost_usd": float(sum(r[4] for r in mine)),
                        "eta_s": eta_seconds(total, ended, first, now),
                        "created_at": _iso(b.created_at),
                    }
                )
            return out

    # -- jobs --------------------------------------------------------------------------------
    def jobs(
        self,
        viewer: Viewer,
        *,
        status: str | None = None,
        batch_id: str | None = None,
        text: str | None = None,
        limit: int = 25,
        cursor: str | None = None,
    ) -> JobPage[dict[str, Any]]:
        """Newest first; `text` matches the id, the problem's id or question, the answer or the error."""
        q = self._scoped(select(Job), Job, viewer)
        if status:
            q = q.where(Job.status == status)
        if batch_id:
            q = q.where(Job.batch_id == batch_id)
        if text:
            like = f"%{text.lower()}%"
            q = q.where(
                or_(
                    func.lower(Job.id).like(like),
                    func.lower(Job.external_id).like(like),
                    func.lower(cast(Job.problem, String)).like(like),
                    func.lower(Job.answer).like(like),
                    func.lower(Job.error).like(like),
                )
            )
        return page_of_jobs(self.sessions, q, _listed, limit=limit, cursor=cursor)

    def job(self, viewer: Viewer, job_id: str) -> dict[str, Any]:
        """The job as the API shows it, plus its reference and policy; NotFound outside the viewer's scope."""
        with self.sessions() as s:
            job = s.get(Job, job_id)
            if job is None or not (viewer.admin or job.tenant_id == viewer.tenant_id):
                raise NotFound(f"no job {job_id}")
            view = JobDetail.of(job, s).to_json()
            reference = {k: job.problem[k] for k in REFERENCE_FIELDS if job.problem.get(k) not in (None, "", [])}
            view.update(reference=reference or None, terminal=job.status in TERMINAL_JOB_VALUES)
            return view

    # -- checkpoints -------------------------------------------------------------------------
    def checkpoints(self) -> dict[str, Any]:
        """Every checkpoint with its parent and gate decision, the training cycles, and the
        per-step training curves (reward mean, loss) in creation order."""
        with self.sessions() as s:
            rows = list(s.scalars(select(Checkpoint).order_by(Checkpoint.created_at)))
            cycles = list(s.scalars(select(TrainingCycle).order_by(TrainingCycle.id.desc()).limit(50)))
            points: list[dict[str, Any]] = []
            for c in rows:
                steps = (c.metrics or {}).get("train_steps") or (c.metrics or {}).get("steps") or []
                for st in steps if isinstance(steps, list) else []:
                    if isinstance(st, dict):
                        points.append(
                            {
                                "x": len(points),
                                "checkpoint": c.id,
                                "reward_mean": st.get("reward_mean"),
                                "loss": st.get("loss"),
                            }
                        )
            return {
                "checkpoints": [
                    {
                        "id": c.id,
                        "parent_id": c.parent_id,
                        "status": c.status,
                        "stage": c.stage,
                        "base_model": c.base_model,
                        "gate": c.gate,
                        "created_at": _iso(c.created_at),
                        "promoted_at": _iso(c.promoted_at),
                        "depth": depth,
                    }
                    for c, depth in _lineage(rows)
                ],
                "cycles": [
                    {
                        "id": cy.id,
                        "trigger": cy.trigger,
                        "status": cy.status,
                        "checkpoint_id": cy.checkpoint_id,
                        "error": cy.error,
                        "created_at": _iso(cy.created_at),
                    }
                    for cy in cycles
                ],
                "curve": points,
            }


def _listed(job: Job) -> dict[str, Any]:
    return {**JobSummary.of(job).to_json(), "question": str(job.problem.get("question", ""))}


def _lineage(rows: list[Checkpoint]) -> list[tuple[Checkpoint, int]]:
    """Checkpoints in tree order (each after its parent, children oldest first) with their depth."""
    ids = {c.id for c in rows}
    children: dict[str | None, list[Checkpoint]] = {}
    for c in rows:
        children.setdefault(c.parent_id if c.parent_id in ids else None, []).append(c)
    out: list[tuple[Checkpoint, int]] = []
    stack = [(c, 0) for c in reversed(children.get(None, []))]
    while stack:
        c, depth = stack.pop()
        out.append((c, depth))
        stack.extend((k, depth + 1) for k in reversed(children.get(c.id, [])))
    return out
