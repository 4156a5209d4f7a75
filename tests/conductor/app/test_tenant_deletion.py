"""Deleting a tenant: nothing of its data is left anywhere the deployment keeps data, and another
tenant's data is untouched, whether an operator runs `conductor tenants delete` or an admin key
calls `DELETE /v1/admin/tenants/{name}`. PostgreSQL store, the API over an in-process worker,
scripted models, a real webhook receiver; the check is a `pg_dump`, every table's rows, and the
files directory."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from conductor.app.batches.ingest import invalid_path
from conductor.app.tenants import create_key
from conductor.cli.main import app as cli
from conductor.config.settings import Settings
from conductor.store.models import Checkpoint
from tests.support.dumps import database_text, files_text, pg_dump_text
from tests.support.tenant_data import api_with_hooks, fill
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.services


@pytest.fixture
def deployment(tmp_path: Path, pg_url: str) -> Iterator[tuple[TestClient, Receiver, Settings]]:
    with api_with_hooks(tmp_path, pg_url) as parts:
        yield parts


def _delete_with_the_cli(client: TestClient, settings: Settings, pg_url: str, monkeypatch) -> dict:
    monkeypatch.setenv("CONDUCTOR_HOME", str(settings.home))
    monkeypatch.setenv("CONDUCTOR_DATABASE_URL", pg_url)
    result = CliRunner().invoke(cli, ["tenants", "delete", "acme", "--yes"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _delete_with_the_admin_route(client: TestClient, settings: Settings, pg_url: str, monkeypatch) -> dict:
    admin, _ = create_key(client.app.state.api.sessions, "operators", scopes=["admin"])  # type: ignore[attr-defined]
    response = client.delete("/v1/admin/tenants/acme", headers={"Authorization": f"Bearer {admin}"})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("delete", [_delete_with_the_cli, _delete_with_the_admin_route], ids=["cli", "admin-route"])
def test_deleting_a_tenant_leaves_none_of_its_data_and_all_of_anothers(deployment, pg_url, monkeypatch, delete):
    client, receiver, settings = deployment
    acme = fill(client, "acme", "ACME-SECRET-7f3a", receiver.url)
    globex = fill(client, "globex", "GLOBEX-KEEP-91c2", receiver.url)
    deadline = time.monotonic() + 30
    while len(receiver.requests) < 4 and time.monotonic() < deadline:  # a job and a batch event each
        time.sleep(0.1)
    sessions = client.app.state.api.sessions  # type: ignore[attr-defined]
    for tenant in (acme, globex):  # what a finalize killed after its commit leaves: the malformed lines
        invalid_path(settings.files_path, tenant.batch_id).write_text(f'{{"custom_id": "{tenant.marker}"}}\n')
    with sessions.begin() as s:  # a checkpoint trained on acme's data, and one on globex's
        s.add(Checkpoint(id="grpo-a", base_model="b", status="active", data_window={"tenants": [acme.tenant_id]}))
        s.add(Checkpoint(id="grpo-g", base_model="b", data_window={"tenants": [globex.tenant_id]}))
    before_db = pg_dump_text(pg_url) + database_text(pg_url)
    before = before_db + files_text(settings.files_path)
    globex_job = client.get(f"/v1/jobs/{globex.job_ids[0]}", headers={"Authorization": f"Bearer {globex.key}"})
    globex_usage = client.app.state.api.service.usage(tenant_id=globex.tenant_id)  # type: ignore[attr-defined]
    tables = {line.split(":", 1)[0] for line in database_text(pg_url).splitlines() if acme.marker in line}

    report = delete(client, settings, pg_url, monkeypatch)

    # the marker was everywhere before: questions, answers, plans, steps, files, webhook bodies
    assert before.count(acme.marker) > 20 and before.count(globex.marker) > 20
    assert {"jobs", "chains", "rounds", "steps", "webhook_deliveries", "call_cache"} <= tables
    assert len(receiver.requests) >= 4 and any(acme.marker.encode() in body for _, body in receiver.requests)
    after_db = pg_dump_text(pg_url) + database_text(pg_url)
    after_files = files_text(settings.files_path)
    assert acme.marker not in after_db and acme.marker not in after_files
    # its id is left only in the lineage of the checkpoint it trained (a record, none of its data)
    rows_naming_it = [line for line in database_text(pg_url).splitlines() if acme.tenant_id in line]
    assert {line.split(":", 1)[0] for line in rows_naming_it} == {"checkpoints"}
    assert after_db.count(globex.marker) == before_db.count(globex.marker) > 10
    assert globex.marker in after_files and invalid_path(settings.files_path, globex.batch_id).exists()
    for file_id in acme.file_ids:
        assert not (settings.files_path / file_id).exists()
    assert all((settings.files_path / f).exists() for f in globex.file_ids)
    assert report["deleted_rows"]["jobs"] == 5 and report["deleted_rows"]["files"] == 3
    assert report["deleted_rows"]["tenants"] == 1 and report["files_removed"] == 3
    assert report["checkpoints_trained_on_its_data"] == [{"checkpoint": "grpo-a", "status": "active", "directly": True}]
    # the other tenant reads exactly what it read before; the deleted one's key no longer works
    h = {"Authorization": f"Bearer {globex.key}"}
    assert client.get(f"/v1/jobs/{globex.job_ids[0]}", headers=h).json() == globex_job.json()
    assert client.app.state.api.service.usage(tenant_id=globex.tenant_id) == globex_usage  # type: ignore[attr-defined]
    assert client.get("/v1/jobs", headers={"Authorization": f"Bearer {acme.key}"}).status_code == 401
