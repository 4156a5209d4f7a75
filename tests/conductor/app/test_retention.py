"""Retention: past `retention_days` a job's texts are gone from the database and the files directory,
its usage numbers stay, and newer jobs are untouched. The API over an in-process worker (SQLite and
PostgreSQL), scripted models, a real webhook receiver; "forty days ago" is every row written before a
moment, moved forty days back."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from celery import Celery
from sqlalchemy import MetaData, create_engine, select, update

from conductor.app.batches.ingest import invalid_path
from conductor.app.retention import REMOVED, run_retention
from conductor.config.settings import Settings
from conductor.runtime import Runtime
from conductor.store.models import Batch, File, Job
from schedulers.beat import beat_schedule
from tasks.names import TaskName
from tasks.retention import register_retention
from tests.support.dumps import database_text, files_text
from tests.support.pools import scripted_pool
from tests.support.system import embedded_system
from tests.support.tenant_data import api_with_hooks, fill


def _age(url: str, before: datetime, by: timedelta) -> None:
    """Every row of every table written before `before` now reads as written `by` earlier."""
    engine = create_engine(url)
    meta = MetaData()
    meta.reflect(engine)
    with engine.begin() as conn:  # row by row: SQLite has no date arithmetic on its text timestamps
        for table in meta.tables.values():
            if "created_at" not in table.c:
                continue
            key = list(table.primary_key.columns)
            for row in conn.execute(select(*key, table.c.created_at).where(table.c.created_at < before)):
                where = [c == v for c, v in zip(key, row[:-1], strict=True)]
                conn.execute(update(table).where(*where).values(created_at=row[-1] - by))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'conductor.db'}"
        return
    yield request.getfixturevalue("pg_url")


def test_old_jobs_lose_their_texts_and_keep_their_numbers_while_new_jobs_are_untouched(tmp_path, database_url):
    with api_with_hooks(tmp_path, database_url) as (client, receiver, settings):
        old = fill(client, "acme", "OLDTEXT-GONE-0a0a", receiver.url)
        time.sleep(0.05)
        moment = datetime.now(UTC)
        time.sleep(0.05)
        new = fill(client, "acme", "NEWTEXT-KEPT-1b1b", receiver.url)
        deadline = time.monotonic() + 30
        while len(receiver.requests) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        api = client.app.state.api  # type: ignore[attr-defined]
        h = {"Authorization": f"Bearer {new.key}"}
        jobs_before = {j: client.get(f"/v1/jobs/{j}", headers=h).json() for j in old.job_ids + new.job_ids}
        usage_before = api.service.usage(tenant_id=old.tenant_id)
        _age(database_url, moment, timedelta(days=40))
        before = database_text(database_url) + files_text(settings.files_path)

        report = run_retention(api.sessions, Settings(home=tmp_path, database_url=database_url, retention_days=30))
        again = run_retention(api.sessions, Settings(home=tmp_path, database_url=database_url, retention_days=30))
        after = database_text(database_url) + files_text(settings.files_path)
        jobs_after = {j: client.get(f"/v1/jobs/{j}", headers=h).json() for j in old.job_ids + new.job_ids}
        usage_after = api.service.usage(tenant_id=old.tenant_id)

    assert before.count(old.marker) > 10 and before.count(new.marker) > 10
    assert old.marker not in after
    assert after.count(new.marker) == before.count(new.marker)  # the newer jobs are whole
    assert report.jobs == 5 and report.files == 3 and report.webhook_deliveries >= 2 and report.cached_answers >= 1
    assert again.jobs == again.files == again.webhook_deliveries == 0  # nothing is done twice
    assert usage_after == usage_before  # tokens, cost, calls and counts by status
    for job_id in new.job_ids:
        assert jobs_after[job_id] == jobs_before[job_id]
    for job_id in old.job_ids:
        was, now = jobs_before[job_id], jobs_after[job_id]
        assert was["answer"] and now["answer"] is None and now["status"] == was["status"] == "done"
        assert now["usage"] == was["usage"] and now.get("model_calls") == was.get("model_calls")
    assert REMOVED in after


def test_malformed_lines_a_finalize_left_behind_go_once_their_batch_has_ended_and_they_are_old(tmp_path):
    # Finalizing a batch removes its malformed lines once they are in its error file; a finalize killed
    # after its commit (or a deployment from before that) leaves them, with the tenant's custom_ids.
    settings = Settings(home=tmp_path, retention_days=30)
    runtime = Runtime(settings)
    runtime.migrate()
    with runtime.sessions.begin() as s:
        s.add_all([Batch(id="batch_ended", status="completed"), Batch(id="batch_running", status="in_progress")])
    forty_days_ago = time.time() - 40 * 86400
    leftovers = {}
    for batch_id, age in [
        ("batch_ended", forty_days_ago),
        ("batch_running", forty_days_ago),
        ("batch_gone", forty_days_ago),
        ("batch_ended_new", time.time()),
    ]:
        path = leftovers[batch_id] = invalid_path(settings.files_path, batch_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"line": 2, "custom_id": "SECRET-ID-0c0c", "message": "not JSON"}\n')
        os.utime(path, (age, age))

    report = run_retention(runtime.sessions, settings)
    runtime.close()

    assert {b for b, path in leftovers.items() if path.exists()} == {"batch_running", "batch_ended_new"}
    assert report.files == 2


def test_an_old_batchs_metadata_and_line_messages_go_once_none_of_its_jobs_is_in_flight(tmp_path):
    # A CLI batch's rejected lines can quote the line ("duplicate custom_id '...'"); a Batch API batch has
    # the caller's metadata. Both go with the texts of its jobs, not while one of its jobs still runs.
    settings = Settings(home=tmp_path, retention_days=30)
    runtime = Runtime(settings)
    runtime.migrate()
    forty_days_ago = datetime.now(UTC) - timedelta(days=40)
    said = {"meta": {"note": "SECRET-META-0e0e"}, "rejected": [{"line": 3, "error": "duplicate custom_id 'SECRET-ID'"}]}
    with runtime.sessions.begin() as s:
        for batch_id, status, job_status in [
            ("cli_done", None, "done"),
            ("api_done", "completed", "failed"),
            ("cli_running", None, "running"),
            ("api_running", "in_progress", "done"),
        ]:
            s.add(Batch(id=batch_id, status=status, created_at=forty_days_ago, **said))
            s.flush()
            s.add(Job(batch_id=batch_id, status=job_status, problem={"question": "q"}, created_at=forty_days_ago))

    run_retention(runtime.sessions, settings)
    with runtime.sessions() as s:
        batches = {b.id: (b.meta, b.rejected) for b in s.scalars(select(Batch))}
    runtime.close()

    assert batches["cli_done"] == batches["api_done"] == (None, [{"line": 3}])
    assert batches["cli_running"] == batches["api_running"] == (said["meta"], said["rejected"])


def test_beat_runs_retention_only_when_a_retention_is_set(tmp_path):
    assert "retention" not in beat_schedule(Settings(home=tmp_path))
    entry = beat_schedule(Settings(home=tmp_path, retention_days=30, retention_check_s=600))["retention"]
    assert entry["task"] == TaskName.RETENTION.value and entry["schedule"] == 600


def test_a_worker_applies_the_retention_beat_sends_whatever_its_own_settings_say(tmp_path):
    # CONDUCTOR_RETENTION_DAYS set where beat runs only: the worker that ran the task read its own
    # (unset) setting and removed nothing, run after run, without a word.
    beat = Settings(home=tmp_path, retention_days=30, retention_check_s=600)
    worker = Runtime(Settings(home=tmp_path))  # no retention_days of its own
    worker.migrate()
    old_bytes = worker.settings.files_path / "file-old"
    old_bytes.parent.mkdir(parents=True, exist_ok=True)
    old_bytes.write_text("SECRET-OLD-0d0d")
    with worker.sessions.begin() as s:
        forty_days_ago = datetime.now(UTC) - timedelta(days=40)
        s.add(File(id="file-old", purpose="batch", filename="in.jsonl", path=str(old_bytes), created_at=forty_days_ago))
    app = Celery("retention-test")
    register_retention(app, worker)
    entry = beat_schedule(beat)["retention"]

    app.tasks[entry["task"]](*entry.get("args", ()), **entry.get("kwargs", {}))
    with worker.sessions() as s:
        left = s.scalars(select(File.id)).all()
    worker.close()

    assert left == [] and not old_bytes.exists()


def test_the_embedded_deployment_applies_retention_in_beats_place(tmp_path, scripted):
    # The embedded worker plays beat's part (reaper, batch sweep) but never sent retention: with
    # CONDUCTOR_RETENTION_DAYS set, `conductor api` on the embedded default kept every text forever.
    pool = scripted_pool(scripted.base_url)
    with embedded_system(tmp_path, pool, retention_days=30, retention_check_s=0.2) as system:
        old_bytes = system.settings.files_path / "file-old"
        old_bytes.parent.mkdir(parents=True, exist_ok=True)
        old_bytes.write_text("SECRET-OLD-0e0e")
        with system.runtime.sessions.begin() as s:
            forty_days_ago = datetime.now(UTC) - timedelta(days=40)
            s.add(
                File(
                    id="file-old", purpose="batch", filename="in.jsonl", path=str(old_bytes), created_at=forty_days_ago
                )
            )
        deadline = time.monotonic() + 20
        while old_bytes.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    assert not old_bytes.exists()
