"""Batches at 100,000 problems: the file streamed in, jobs inserted in chunks, results and traces
streamed out with eager loading (a fixed number of queries per chunk, never one per row).

Memory stays bounded by the chunk size: no list of every problem, job or id is ever built
(unless the caller asks for the ids of a small batch).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session, load_only, selectinload, sessionmaker

from conductor.domain.errors import InputError
from conductor.domain.problem import Problem
from conductor.store.models import Batch, Chain, Job, Reward, Round, new_id, utcnow

CHUNK = 1000


@dataclass
class StreamedBatch:
    batch_id: str
    total: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    job_ids: list[str] | None = None


def insert_streaming(
    sessions: sessionmaker[Session],
    items: Iterable[tuple[int, Problem | InputError]],
    *,
    batch: Batch,
    job_row: Callable[[Problem, int], dict[str, Any]],
    limit: int | None = None,
    chunk: int = CHUNK,
    after_chunk: Callable[[], Any] | None = None,
    keep_ids: bool = False,
) -> StreamedBatch:
    """Insert a batch row, then its jobs `chunk` at a time (one transaction each), calling
    `after_chunk` (the feeder) after every commit so the first jobs run while the file is read."""
    out = StreamedBatch(batch.id, job_ids=[] if keep_ids else None)
    with sessions.begin() as s:
        s.add(batch)
    rows: list[dict[str, Any]] = []

    def flush() -> None:
        if not rows:
            return
        with sessions.begin() as s:
            s.execute(insert(Job), rows)
        if out.job_ids is not None:
            out.job_ids += [r["id"] for r in rows]
        rows.clear()
        if after_chunk is not None:
            after_chunk()

    for line, item in items:
        if isinstance(item, InputError):
            out.rejected.append({"line": line, "error": str(item)})
            continue
        if limit is not None and out.total >= limit:
            break
        row = job_row(item, line)
        row.setdefault("id", new_id())
        row.setdefault("created_at", utcnow())
        rows.append(row)
        out.total += 1
        if len(rows) >= chunk:
            flush()
    flush()
    with sessions.begin() as s:
        s.execute(update(Batch).where(Batch.id == batch.id).values(total=out.total, rejected=out.rejected))
    return out


def _result_options() -> Any:
    # ResultLine.of reads job.chains -> chain.rounds -> round.workflow: load just those columns.
    return (
        selectinload(Job.chains)
        .selectinload(Chain.rounds)
        .options(load_only(Round.id, Round.chain_id, Round.round_index, Round.workflow))
    )


def iter_jobs(
    sessions: sessionmaker[Session], *, batch_id: str | None = None, job_ids: Iterable[str] | None = None
) -> Iterator[Job]:
    """Jobs of a batch in line order (or the given ids in order), with chains and rounds eagerly loaded."""
    if batch_id is not None:
        with sessions() as s:
            q = (
                select(Job)
                .where(Job.batch_id == batch_id)
                .order_by(Job.line_no, Job.id)
                .options(_result_options())
                .execution_options(yield_per=CHUNK)
            )
            yield from s.scalars(q)
        return
    ids = list(job_ids or [])
    with sessions() as s:
        for i in range(0, len(ids), CHUNK):
            part = ids[i : i + CHUNK]
            by_id = {j.id: j for j in s.scalars(select(Job).where(Job.id.in_(part)).options(_result_options()))}
            for job_id in part:
                yield by_id[job_id]
            s.expunge_all()


def write_traces(
    sessions: sessionmaker[Session],
    fh: IO[str],
    line: Callable[[Round, list[Reward]], dict[str, Any]],
    *,
    include_eval: bool = False,
) -> int:
    """Every Conductor round as a JSONL line, `CHUNK` rounds at a time: chain and job joined in,
    steps and the chunk's rewards fetched with one query each."""
    count = 0
    with sessions() as s:
        q = (
            select(Round)
            .where(Round.completion_text.is_not(None))
            .order_by(Round.id)
            .options(selectinload(Round.chain).selectinload(Chain.job), selectinload(Round.steps))
            .execution_options(yield_per=CHUNK)
        )
        for part in s.scalars(q).partitions():
            rounds = [r for r in part if include_eval or "eval" not in (r.chain.job.options or {})]
            job_ids = {r.chain.job_id for r in rounds}
            rewards: dict[str, list[Reward]] = {j: [] for j in job_ids}
            if job_ids:
                for rw in s.scalars(select(Reward).where(Reward.job_id.in_(job_ids)).order_by(Reward.id)):
                    rewards[rw.job_id].append(rw)
            for rnd in rounds:
                fh.write(json.dumps(line(rnd, rewards[rnd.chain.job_id])) + "\n")
                count += 1
            s.expunge_all()
    return count
