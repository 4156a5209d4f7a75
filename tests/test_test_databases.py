"""The suite runs in several processes (pytest-xdist): a test's Redis database is its own while it runs."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
import redis

from tests.support.databases import REDIS_URL, TEST_REDIS_DBS, fresh_redis_db, redis_db_lease


@pytest.mark.services
def test_redis_databases_held_at_once_are_all_different():
    with ExitStack() as stack:
        urls = [stack.enter_context(fresh_redis_db()) for _ in range(6)]
    assert len(set(urls)) == 6
    assert all(int(u.rsplit("/", 1)[1]) in TEST_REDIS_DBS for u in urls)


@pytest.mark.services
def test_a_database_is_leased_while_held_and_given_back_after():
    admin = redis.Redis.from_url(f"{REDIS_URL}/0")
    with fresh_redis_db() as url:
        lease = redis_db_lease(int(url.rsplit("/", 1)[1]))
        assert admin.get(lease) is not None
    assert admin.get(lease) is None
    admin.close()
