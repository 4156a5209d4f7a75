"""Reading a Batch API input file on a worker is resumable and never doubles a line: a reader killed
after any committed chunk is resumed from the batch row, and racing readers commit each line once."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from conductor.app.batches import ingest as batch_ingest
from conductor.app.batches.batch_api import Batches
from conductor.app.batches.ingest import BatchReader, error_lines, invalid_path
from conductor.app.tenants import create_key
from conductor.config.settings import Settings
from conductor.runtime import Runtime
from conductor.store.models import Batch, Job
from conductor.system import service_for
from tests.support.pools import scripted_pool

LINES = 230
BAD = {5, 17, 64, 65, 120, 229}  # malformed lines, some at chunk edges


class NoQueue:
    def submit(self, job_ids: list[str]) -> None:
        pass


class Killed(Exception):
    """Stands for the reader's process dying right after a commit."""


@pytest.fixture(params=["sqlite", "postgresql"])
def batches(request, tmp_path, monkeypatch) -> Batches:
    monkeypatch.setattr(batch_ingest, "CHUNK", 20)
    url = None if request.param == "sqlite" else request.getfixturevalue("pg_url")
    runtime = Runtime(Settings(home=tmp_path, database_url=url), pool=scripted_pool("http://127.0.0.1:9/v1"))
    runtime.migrate()
    yield Batches(service_for(runtime, NoQueue().submit))
    runtime.close()


def _input() -> tuple[bytes, list[int]]:
    """The input file, and the file line numbers of its malformed lines."""
    lines: list[str] = []
    bad: list[int] = []
    for i in range(1, LINES + 1):
        if i in BAD:
            lines.append("{broken" if i % 2 else json.dumps({"custom_id": f"r{i}", "method": "GET", "url": "/x"}))
            bad.append(len(lines))
        else:
            body = {"messages": [{"role": "user", "content": f"q {i}"}]}
            lines.append(
                json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
            )
        if i % 50 == 0:
            lines.append("")  # blank lines are skipped, not counted
    return ("\n".join(lines) + "\n").encode(), bad


def _upload(b: Batches, tmp_path: Path) -> str:
    _, tenant = create_key(b.sessions, "acme")
    f = b.save_file(tenant, "in.jsonl", "batch", [_input()[0]])
    return b.create(tenant, f.id, endpoint="/v1/chat/completions", window="24h", metadata=None).id


def _tenant(b: Batches, batch_id: str) -> str:
    with b.sessions() as s:
        return str(s.get_one(Batch, batch_id).tenant_id)


def _assert_every_line_once(b: Batches, batch_id: str) -> None:
    with b.sessions() as s:
        batch = s.get_one(Batch, batch_id)
        lines = Counter(s.scalars(select(Job.line_no).where(Job.batch_id == batch_id)))
        custom = Counter(s.scalars(select(Job.external_id).where(Job.batch_id == batch_id)))
    good = LINES - len(BAD)
    assert batch.status == "in_progress" and batch.total == good and batch.invalid_lines == len(BAD)
    assert max(lines.values()) == 1 and max(custom.values()) == 1 and len(lines) == good
    assert set(custom) == {f"r{i}" for i in range(1, LINES + 1) if i not in BAD}
    errors = [r["line"] for r in error_lines(invalid_path(b.root, batch_id), batch.lines_read)]
    assert errors == _input()[1]  # in input order, each once, nothing a killed reader left past its commit
    view = b.get(batch.tenant_id, batch_id)
    assert view["request_counts"]["total"] == LINES


@pytest.mark.parametrize("die_after", [1, 4, 11])
def test_a_reader_killed_after_any_chunk_is_resumed_without_losing_or_doubling_a_line(batches, tmp_path, die_after):
    batch_id = _upload(batches, tmp_path)
    committed = BatchReader._committed
    calls = {"n": 0}

    def dying_commit(self):
        committed(self)
        calls["n"] += 1
        if calls["n"] == die_after:
            # Killed after the commit, with the next chunk's error lines half written.
            with invalid_path(self.root, batch_id).open("a") as fh:
                fh.write(json.dumps({"line": 10**6, "custom_id": None, "message": "x"}) + "\n{trunc")
            raise Killed

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BatchReader, "_committed", dying_commit)
        with pytest.raises(Killed):
            batches.ingest(batch_id)
    with batches.sessions() as s:
        assert s.get_one(Batch, batch_id).status == "validating"  # beat would send the read again
    assert batches.ingest(batch_id) is True
    assert batches.ingest(batch_id) is False  # a late duplicate of the message changes nothing
    _assert_every_line_once(batches, batch_id)


def test_racing_readers_commit_each_line_once(batches, tmp_path):
    batch_id = _upload(batches, tmp_path)
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(batches.ingest(batch_id))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if not any(results):  # every reader lost a compare-and-set to another: the next read finishes
        assert batches.ingest(batch_id)
    _assert_every_line_once(batches, batch_id)


def test_a_cancel_while_reading_stops_the_reader(batches, tmp_path):
    batch_id = _upload(batches, tmp_path)
    committed = BatchReader._committed
    chunks = {"n": 0}

    def cancel_after_first(self):
        committed(self)
        chunks["n"] += 1
        if chunks["n"] == 1:  # the first chunk committed: the tenant cancels now
            batches.cancel(_tenant(batches, batch_id), batch_id)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(BatchReader, "_committed", cancel_after_first)
        assert batches.ingest(batch_id) is False
    with batches.sessions() as s:
        assert s.get_one(Batch, batch_id).status == "cancelling"
        assert len(list(s.scalars(select(Job.id).where(Job.batch_id == batch_id)))) < LINES - len(BAD)
