"""Databases of their own for a test or a benchmark run: a PostgreSQL database created and dropped, a
Redis database number flushed before and after."""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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


#: Redis database numbers tests may take; 14 and 15 are the benchmarks' own.
TEST_REDIS_DBS = range(1, 14)


@contextmanager
def fresh_redis_db() -> Iterator[str]:
    """A Redis database number of its own, flushed before and after.

    Held under a lease key in database 0 while in use, so that test processes running side by side
    (pytest-xdist) never share, and so never flush, each other's queues."""
    import redis

    admin = redis.Redis.from_url(f"{REDIS_URL}/0")
    token = f"{os.getpid()}-{uuid.uuid4().hex}"
    deadline = time.monotonic() + 300
    db = _take(admin, token)
    while db is None:
        if time.monotonic() > deadline:
            raise TimeoutError("every test Redis database stayed taken for 5 minutes")
        time.sleep(0.5)
        db = _take(admin, token)
    url = f"{REDIS_URL}/{db}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()
        if admin.get(redis_db_lease(db)) == token.encode():
            admin.delete(redis_db_lease(db))
        admin.close()


def _take(admin: Any, token: str) -> int | None:
    for n in random.sample(TEST_REDIS_DBS, len(TEST_REDIS_DBS)):
        if admin.set(redis_db_lease(n), token, nx=True, ex=3600):
            return n
    return None


def redis_db_lease(db: int) -> str:
    """The key in Redis db 0 that holds database `db` for the test using it."""
    return f"conductor-test:redis-db:{db}"
