"""Property-based fuzzing of the HTTP API from its own OpenAPI schema (schemathesis): whatever
the request, valid or not, authenticated or not, the answer is never a 5xx. In-process ASGI app
on the embedded system (SQLite + in-process worker) with the scripted model server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.python import asgi

from api.app import create_app
from conductor.app.tenants import create_key
from conductor.config.settings import Settings
from conductor.runtime import Runtime
from tests.conftest import default_script
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer

_KEY: dict[str, str] = {}
BASE = f"http://{asgi.HOST}"


@dataclass
class Target:
    schema: Any
    client: asgi.ASGIClient


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    """The app started once for the module (its lifespan runs under a TestClient); requests go in
    through schemathesis' ASGI client, which is not entered, so it starts and stops no lifespan."""
    home: Path = tmp_path_factory.mktemp("fuzz")
    server = ScriptedLLMServer(default_script()).start()
    pool = scripted_pool(server.base_url)
    settings_ = Settings(
        home=home, broker_url="memory://", pool_file=write_pool(pool, home / "pool.yaml"), recursion=False
    )
    rt = Runtime(settings_, pool=pool)
    rt.migrate()
    _KEY["key"], _ = create_key(rt.sessions, "fuzzer")
    rt.close()
    app = create_app(settings_)
    try:
        with TestClient(app):
            yield Target(schemathesis.openapi.from_dict(app.openapi()), asgi.get_client(app))
    finally:
        server.stop()


def _operations() -> list[tuple[str, str]]:
    spec = create_app(Settings(broker_url="memory://")).openapi()  # no lifespan: the schema only
    return [(method.upper(), path) for path, item in spec["paths"].items() for method in item]


OPERATIONS = _operations()
MODES = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]


def _fuzz(
    operation: Any,
    session: Any,
    mode: GenerationMode,
    headers: dict[str, str],
    max_examples: int,
    base_url: str = BASE,
    steer: Callable[[Any], Any] | None = None,
) -> list[str]:
    """The 5xx answers (with a curl command each) to `max_examples` cases of `operation` in `mode`,
    sent through `session`: the ASGI client here, a `requests.Session` for a live server. `steer`
    changes each generated case before it is sent (to make more of them acceptable, say)."""
    failures: list[str] = []
    cases = operation.as_strategy(mode)

    @given(case=cases.map(steer) if steer else cases)
    @settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,  # the same examples every run: CI stays reproducible, a failure replays
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def check(case: Any) -> None:
        response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
        if response.status_code >= 500:
            failures.append(f"{response.status_code}: {response.text[:300]}\n{case.as_curl_command()}")

    try:
        check()
    except Unsatisfiable:
        if mode is GenerationMode.POSITIVE:
            raise  # nothing to negate (no parameters, no body) is fine; nothing valid is not
    return failures


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_request_gets_a_server_error(target: Target, method: str, path: str, mode: GenerationMode) -> None:
    operation = target.schema[path][method]
    failures = _fuzz(operation, target.client, mode, {"Authorization": f"Bearer {_KEY['key']}"}, max_examples=40)
    assert not failures, "\n\n".join(failures[:3])


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_without_a_valid_key_nothing_but_public_routes_answers(target: Target, method: str, path: str) -> None:
    operation = target.schema[path][method]
    seen: list[int] = []

    @given(case=operation.as_strategy(GenerationMode.POSITIVE))
    @settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
    def check(case: Any) -> None:
        auth = {"Authorization": "Bearer ck-not-a-key"}
        seen.append(case.call(base_url=BASE, session=target.client, headers=auth, timeout=30).status_code)

    check()
    assert all(s < 500 for s in seen)
    if path != "/metrics":  # Prometheus scrapes without a key
        assert set(seen) <= {400, 401}, seen
