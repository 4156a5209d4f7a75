"""Shared fixtures: the scripted OpenAI-compatible server, stores on SQLite and PostgreSQL, runtimes."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.scripted_llm import Reply, ScriptedLLMServer
from tests.support.workflows import conductor_reply

PG_ADMIN_URL = os.environ.get("CONDUCTOR_TEST_PG", "postgresql+psycopg://root@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("CONDUCTOR_TEST_REDIS", "redis://127.0.0.1:6379")
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


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A PostgreSQL database of its own, dropped afterwards."""
    from sqlalchemy import create_engine, text

    name = f"conductor_t_{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def fresh_redis_db() -> Iterator[str]:
    """A Redis database number of its own, flushed before and after."""
    import redis

    db = 1 + (os.getpid() + uuid.uuid4().int) % 14
    url = f"{REDIS_URL}/{db}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


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
