"""The schemathesis fuzzing of tests/api/test_fuzz.py against a production deployment: a real
`conductor api` process, Celery workers and beat on Redis and PostgreSQL, the scripted model server.
PostgreSQL refuses text SQLite takes (NUL), so what the embedded store lets through can fail here.

Whatever the request, the answer is never a 5xx; and every job the API accepted while being fuzzed
ends (done, failed with a reason, budget_exceeded or cancelled) once the workers have run it:
nothing accepted is left `waiting`, `queued` or `running`. Fewer examples than the embedded run (a
live server over HTTP on a busy machine): about a minute and a half in all."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from schemathesis import GenerationMode
from sqlalchemy import select

from conductor.domain.states import TERMINAL_JOB_VALUES
from conductor.store.models import Job
from tests.api.test_fuzz import MODES, OPERATIONS, _fuzz
from tests.conftest import default_script
from tests.support.api_deployment import Deployment, deploy
from tests.support.databases import fresh_pg_database, fresh_redis_db

pytestmark = pytest.mark.services

#: Routes that accept a job: what the final check drives again, in positive mode, to have jobs to follow.
SUBMITTING = [("POST", "/v1/jobs"), ("POST", "/v1/chat/completions"), ("POST", "/v1/responses")]
#: How long an accepted job may take to end once fuzzing stops (scripted models answer at once).
END_WITHIN_S = 90


@dataclass
class Live:
    deployment: Deployment
    schema: Any  #: read from the running server's /openapi.json
    session: requests.Session
    headers: dict[str, str]  #: a tenant key with every default scope

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.deployment.port}"

    def fuzz(self, method: str, path: str, mode: GenerationMode, max_examples: int, steer: Any = None) -> list[str]:
        operation = self.schema[path][method]
        return _fuzz(operation, self.session, mode, self.headers, max_examples, base_url=self.base_url, steer=steer)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    home: Path = tmp_path_factory.mktemp("fuzz-pg")
    with (
        fresh_pg_database() as pg,
        fresh_redis_db() as redis_url,
        deploy(home, pg, redis_url, default_script(), worker_names=("w1",), concurrency=8) as d,
        requests.Session() as session,
    ):
        schema = schemathesis.openapi.from_url(f"http://127.0.0.1:{d.port}/openapi.json")
        yield Live(d, schema, session, {"Authorization": f"Bearer {d.key('fuzzer')}"})


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_request_gets_a_server_error_on_postgresql(live: Live, method: str, path: str, mode: GenerationMode) -> None:
    failures = live.fuzz(method, path, mode, max_examples=15)
    assert not failures, "\n\n".join(failures[:3])


def towards_acceptance(case: Any) -> Any:
    """A generated case, with what makes most of them bounce before a job exists set right: a model
    the API serves (the schema allows any string), `store` left on (a response is a stored job), and
    no repeated Idempotency-Key (which answers the first job again). The rest stays as generated."""
    if isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = "conductor"
        case.body.pop("store", None)
    if case.headers:
        case.headers = {k: v for k, v in case.headers.items() if k.lower() != "idempotency-key"}
    return case


def test_every_job_the_api_accepted_while_fuzzed_ends(live: Live) -> None:
    for method, path in SUBMITTING:
        answers = live.fuzz(method, path, GenerationMode.POSITIVE, max_examples=30, steer=towards_acceptance)
        # A 502 is how a chat or response request answers a job that failed (here: scripted workers
        # that write no JSON for a JSON format): the job ended, as the check below reads in the store.
        server_errors = [a for a in answers if not a.startswith("502:")]
        assert not server_errors, "\n\n".join(server_errors[:3])

    deadline = time.monotonic() + END_WITHIN_S
    while True:
        with live.deployment.runtime.sessions() as s:
            jobs = s.execute(select(Job.id, Job.status, Job.error)).all()
        open_ = [(j.id, j.status) for j in jobs if j.status not in TERMINAL_JOB_VALUES]
        if not open_ or time.monotonic() > deadline:
            break
        time.sleep(1.0)

    assert len(jobs) >= 10, f"the fuzzing got only {len(jobs)} jobs accepted: nothing much was checked"
    assert open_ == [], f"{len(open_)} of {len(jobs)} accepted jobs had not ended after {END_WITHIN_S} s: {open_[:10]}"
    failed_without_reason = [j.id for j in jobs if j.status == "failed" and not (j.error or "").strip()]
    assert failed_without_reason == []
