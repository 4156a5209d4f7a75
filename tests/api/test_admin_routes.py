"""The administration routes: only a key with the `admin` scope may set a tenant's training consent
or delete a tenant (a tenant's own key, with every default scope, gets 403 and changes nothing),
and what an admin sets is what training reads. The API over an embedded system (SQLite, in-process
worker) and scripted models whose first plan is right and second unparseable, so each job with two
samples is a group that training could use. Deletion's full guarantee (no trace of the tenant in a
dump of PostgreSQL and the files, another tenant untouched) is tests/conductor/app/test_tenant_deletion.py,
run through this route as through the CLI."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from conductor.app.tenants import create_key
from conductor.config.settings import Settings
from conductor.store.models import Tenant
from reward_pipeline.rewards import score_job
from reward_pipeline.training.dataset import TraceFilter, build_dataset
from tests.reward_pipeline.training.test_dataset import _script
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer


@dataclass
class Admin:
    client: TestClient
    admin: dict[str, str]  #: headers of a key with the `admin` scope only
    acme: dict[str, str]  #: headers of acme's key: every default scope, not `admin`
    acme_job: str

    @property
    def sessions(self):  # type: ignore[no-untyped-def]
        return self.client.app.state.api.sessions  # type: ignore[attr-defined]

    def tenant(self, name: str) -> Tenant | None:
        from sqlalchemy import select

        with self.sessions() as s:
            return s.scalar(select(Tenant).where(Tenant.name == name))

    def dataset_jobs(self) -> set[str]:
        return {r.job_id for r in build_dataset(self.sessions, TraceFilter(train_on_tenant_data=True)).rows}


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Admin]:
    server = ScriptedLLMServer(_script(), prompt_token_ids=True).start()
    pool_file = write_pool(scripted_pool(server.base_url), tmp_path / "pool.yaml")
    settings = Settings(home=tmp_path, broker_url="memory://", pool_file=pool_file, recursion=False, plan_retries=0)
    try:
        with TestClient(create_app(settings)) as client:
            sessions = client.app.state.api.sessions  # type: ignore[attr-defined]
            admin, _ = create_key(sessions, "operators", scopes=["admin"])
            acme, _ = create_key(sessions, "acme")
            h = {"Authorization": f"Bearer {acme}"}
            problem = {"question": "question of acme", "answer": "42", "kind": "math"}
            job = client.post("/v1/jobs", json={"problem": problem, "samples": 2}, headers=h).json()["id"]
            deadline = time.monotonic() + 60
            while client.get(f"/v1/jobs/{job}", headers=h).json()["status"] != "done":
                assert time.monotonic() < deadline, "acme's job did not finish"
                time.sleep(0.1)
            score_job(sessions, job)
            yield Admin(client, {"Authorization": f"Bearer {admin}"}, h, job)
    finally:
        server.stop()


def test_a_tenants_own_key_cannot_set_consent_or_delete_and_changes_nothing(deployment: Admin) -> None:
    d = deployment
    consent = d.client.put("/v1/admin/tenants/acme/training", json={"training": False}, headers=d.acme)
    deletion = d.client.delete("/v1/admin/tenants/acme", headers=d.acme)
    anonymous = d.client.delete("/v1/admin/tenants/acme")

    assert (consent.status_code, deletion.status_code, anonymous.status_code) == (403, 403, 401)
    assert consent.json()["error"]["type"] == "permission_error"
    tenant = d.tenant("acme")
    assert tenant is not None and tenant.train_on_data is None
    assert d.client.get(f"/v1/jobs/{d.acme_job}", headers=d.acme).status_code == 200  # key and job still there
    assert d.acme_job in d.dataset_jobs()


def test_an_admin_sets_a_tenants_training_consent_and_training_follows_it(deployment: Admin) -> None:
    d = deployment
    assert d.acme_job in d.dataset_jobs()  # never said: the default (train on tenant data) lets it in

    no = d.client.put("/v1/admin/tenants/acme/training", json={"training": False}, headers=d.admin)
    assert no.status_code == 200, no.text
    assert no.json() == {"tenant": "acme", "tenant_id": d.tenant("acme").id, "training": False, "trains": False}
    assert d.acme_job not in d.dataset_jobs()
    excluded = build_dataset(d.sessions, TraceFilter(train_on_tenant_data=True)).excluded["no_training_consent"]
    assert excluded == 2  # both of its samples

    unset = d.client.put("/v1/admin/tenants/acme/training", json={"training": None}, headers=d.admin)
    assert unset.json()["training"] is None and unset.json()["trains"] is True
    assert d.acme_job in d.dataset_jobs()

    unknown = d.client.put("/v1/admin/tenants/nobody/training", json={"training": False}, headers=d.admin)
    garbled = d.client.put("/v1/admin/tenants/acme/training", json={"training": "maybe"}, headers=d.admin)
    assert (unknown.status_code, garbled.status_code) == (404, 400)


def test_an_admin_deletes_a_tenant_whose_key_then_stops_working(deployment: Admin) -> None:
    d = deployment
    response = d.client.delete("/v1/admin/tenants/acme", headers=d.admin)

    assert response.status_code == 200, response.text
    report = response.json()
    assert report["tenant"] == "acme" and report["deleted_rows"]["jobs"] == 1 and report["deleted_rows"]["tenants"] == 1
    assert d.tenant("acme") is None and d.tenant("operators") is not None
    assert d.client.get("/v1/jobs", headers=d.acme).status_code == 401
    assert d.acme_job not in d.dataset_jobs()
    assert d.client.delete("/v1/admin/tenants/acme", headers=d.admin).status_code == 404
