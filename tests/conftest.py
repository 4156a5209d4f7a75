"""Shared fixtures: the scripted OpenAI-compatible server, stores on SQLite and PostgreSQL, runtimes."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import fresh_pg_database, fresh_redis_db
from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import conductor_reply

MODEL_HOME = Path(os.environ.get("CONDUCTOR_TEST_MODEL_HOME", Path(__file__).resolve().parent.parent / ".conductor"))
DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


def default_script(worker_delay: float = 0.0):
    def script(model: str, messages: list[dict], body: dict) -> Reply:
        if model.endswith("scripted-conductor"):
            return conductor_reply(messages)
        last = messages[-1]["content"]
        seen = len([m for m in messages if m["role"] == "assistant"])
        return Reply(f"{model.rsplit('-', 1)[-1]} did <{last[:40]}> seeing {seen}", delay_s=worker_delay)

    return script


@pytest.fixture
def scripted() -> Iterator[ScriptedLLMServer]:
    server = ScriptedLLMServer(default_script(worker_delay=0.0)).start()
    yield server
    server.stop()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database per test, dropped afterwards."""
    with fresh_pg_database() as url:
        yield url


@pytest.fixture
def redis_db() -> Iterator[str]:
    """A Redis database number of its own, flushed before and after."""
    with fresh_redis_db() as url:
        yield url
