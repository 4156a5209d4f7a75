"""A Batch API upload while PostgreSQL or Redis does not answer (the fast half of the partition
test, `tests/integration/test_partitions.py`): the client gets a 503 it can retry and no bytes stay
behind without their row, or, once the batch row is stored, a 200 and the read sent by the sweep
(never an error that would have the client create the batch twice)."""

from __future__ import annotations

import io

import kombu.exceptions
import sqlalchemy.exc
from sqlalchemy import select

from conductor.store.models import Batch
from tests.api.conftest import ApiHarness
from tests.support.api_deployment import batch_file


def _dead_link(*_: object, **__: object) -> None:
    raise sqlalchemy.exc.OperationalError("INSERT INTO files ...", {}, Exception("connection timeout expired"))


def test_an_upload_whose_row_cannot_be_stored_answers_503_and_leaves_no_bytes(harness: ApiHarness, monkeypatch):
    headers = harness.headers(harness.key("acme"))
    batches = harness.client.app.state.batches  # type: ignore[attr-defined]
    monkeypatch.setattr(batches.sessions, "begin", _dead_link)

    r = harness.client.post(
        "/v1/files", files={"file": ("in.jsonl", io.BytesIO(batch_file(3)))}, data={"purpose": "batch"}, headers=headers
    )

    assert r.status_code == 503, r.text
    assert r.headers["Retry-After"] == "5"
    assert r.json()["error"]["code"] == "service_unavailable"
    assert "connection timeout" not in r.text  # the driver's words (hosts, ports) stay in the log
    assert not list((harness.home / "files").glob("file-*"))


def test_a_batch_whose_read_the_broker_refuses_is_created_once_and_answered_200(harness: ApiHarness, monkeypatch):
    headers = harness.headers(harness.key("acme"))
    f = harness.client.post(
        "/v1/files", files={"file": ("in.jsonl", io.BytesIO(batch_file(3)))}, data={"purpose": "batch"}, headers=headers
    ).json()
    batches = harness.client.app.state.batches  # type: ignore[attr-defined]

    def broker_away(kind: str, batch_id: str) -> None:
        raise kombu.exceptions.OperationalError("Timeout connecting to server")

    monkeypatch.setattr(batches, "send", broker_away)
    body = {"input_file_id": f["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    r = harness.client.post("/v1/batches", json=body, headers=headers)

    assert r.status_code == 200, r.text
    assert r.json()["status"] == "validating"
    with batches.sessions() as s:
        assert list(s.scalars(select(Batch.id).where(Batch.input_file_id == f["id"]))) == [r.json()["id"]]
