"""An API over an embedded system (SQLite + in-process worker) with the scripted model server."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from conductor.app.tenants import Quotas, create_key
from conductor.config.settings import Settings
from tests.support.cluster import write_pool
from tests.support.pools import scripted_pool
from tests.support.scripted_llm import ScriptedLLMServer


@dataclass
class ApiHarness:
    client: TestClient
    server: ScriptedLLMServer
    home: Path

    def key(self, tenant: str, **kwargs: object) -> str:
        key, _ = create_key(self.client.app.state.api.sessions, tenant, **kwargs)  # type: ignore[attr-defined]
        return key

    def headers(self, key: str, **extra: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}", **extra}


@pytest.fixture
def harness(tmp_path: Path, scripted: ScriptedLLMServer) -> Iterator[ApiHarness]:
    pool_file = write_pool(scripted_pool(scripted.base_url), tmp_path / "pool.yaml")
    settings = Settings(home=tmp_path, broker_url="memory://", pool_file=pool_file, recursion=False, batch_sweep_s=0.2)
    with TestClient(create_app(settings)) as client:
        yield ApiHarness(client, scripted, tmp_path)


__all__ = ["ApiHarness", "Quotas"]
