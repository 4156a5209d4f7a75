"""Databases of their own for a test or a benchmark run: a PostgreSQL database created and dropped, a
Redis database number flushed before and after."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

PG_ADMIN_URL = os.environ.get("CONDUCTOR_TEST_PG", "postgresql+psycopg://root@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("CONDUCTOR_TEST_REDIS", "redis://127.0.0.1:6379")


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
