"""Batches at 100,000 problems: the file streamed in, jobs inserted in chunks, results and traces
streamed out with eager loading (a fixed number of queries per chunk, never one per row).

Memory stays bounded by the chunk size: no list of every problem, job or id is ever built
(unless the caller asks for the ids of a small batch).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session, load_only, selectinload, sessionmaker

from conductor.domain.errors import InputError
from conductor.store import queries
from conductor.store.models import Batch, Chain, Job, Reward, Round, new_id, utcnow

CHUNK = 1000
T = TypeVar("T")


@dataclass
class StreamedBatch:
    batch_id: str
    total: int = 0
    rejected: list[dict[str, Any]] = field(default_factory=list)
    job_ids: list[str] | None = None
    stopped: bool = False  # a chunk's guard refused it: nothing from there on was inserted


@dataclass
class Chunk:
    """One transaction's worth of input, as a guard sees it inside that transaction."""

    rows: list[dict[str, Any]]  # the job rows about to be inserted
    rejected: list[dict[str, Any]]  # this chunk's malformed lines: {"line", "error"}
    total: int  # valid lines so far, this chunk's included
    final: bool  # the input ended with this chunk


#: Runs first in each chunk's transaction (a compare-and-set on the batch row, say); False inserts
#: nothing and stops the stream.
ChunkGuard = Callable[[Session, Chunk], bool]


def insert_streaming(
    sessions: sessionmaker[Session],
    items: Iterable[tuple[int, T | InputError]],
    *,
    batch: Batch | None,
    job_row: Callable[[T, int], dict[str, Any]],
    limit: int | None = None,
    chunk: int = CHUNK,
    after_chunk: Callable[[], Any] | None = None,
    keep_ids: bool = False,
    guard: ChunkGuard | None = None,
) -> StreamedBatch:
    """Insert jobs `chunk` input lines at a time (one transaction each), calling `after_chunk` (the
    feeder) after every commit so the first jobs run while the file is read.

    With `batch`, its row is inserted first and its total and rejected lines recorded at the end (a
    CLI batch). Without, the batch row exists already and `guard` keeps it (a Batch API read): it is
    called for every chunk, the last included even when it holds no line, and malformed lines are
    left to it (none is kept in memory)."""
    out = StreamedBatch(batch.id if batch is not None else "", job_ids=[] if keep_ids else None)
    if batch is not None:
        with sessions.begin() as s:
            s.add(batch)
    rows: list[dict[str, Any]] = []
    rejected: list[dict[str, Any]] = []

    def flush(final: bool) -> bool:
        committed = bool(rows) or (guard is not None and (bool(rejected) or final))
        if committed:
            with sessions.begin() as s:
                if guard is not None and not guard(s, Chunk(rows, rejected, out.total, final)):
                    return False
                if rows:
                    s.execute(insert(Job), rows)
        if out.job_ids is not None:
            out.job_ids += [r["id"] for r in rows]
        if batch is not None:
            out.rejected += rejected
        rows.clear()
        rejected.clear()
        if committed and after_chunk is not None:
            after_chunk()
        return True

    for line, item in items:
        if isinstance(item, InputError):
            rejected.append({"line": line, "error": str(item)})
        elif limit is not None and out.total >= limit:
            break
        else:
            row = job_row(item, line)
            row.setdefault("id", new_id())
            row.setdefault("created_at", utcnow())
            rows.append(row)
            out.total += 1
        if len(rows) + len(rejected) >= chunk and not flush(final=False):
            out.stopped = True
            return out
    if not flush(final=True):
        out.stopped = True
        return out
    if batch is not None:
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
    train_on_tenant_data: bool = True,
) -> int:
    """Every Conductor round as a JSONL line, `CHUNK` rounds at a time: chain and job joined in,
    steps and the chunk's rewards fetched with one query each. The export is training data: rounds
    of tenants whose traces may not train the Conductor are left out (`conductor.domain.consent`)."""
    count = 0
    with sessions() as s:
        q = (
            select(Round)
            .join(Job, Round.job_id == Job.id)
            .where(Round.completion_text.is_not(None), queries.trainable_jobs(train_on_tenant_data))
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
