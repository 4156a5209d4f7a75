"""Peers that go silent instead of closing: the connection hardening of `conductor.config.connections`
reaches real PostgreSQL and Redis connections, a transaction whose client stopped answering gives
up its row locks within the configured limit, and a Redis call to a frozen server fails instead of
hanging. Each limit is shown to be what does it: without it, the wait goes on."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from conductor.config.connections import Links
from conductor.store.db import make_engine
from tests.support.chaos import PrivateRedis, services_missing

pytestmark = pytest.mark.services

FAST = Links(tcp_keepalive_idle_s=3, tcp_user_timeout_s=9, pg_idle_in_transaction_timeout_s=2, redis_socket_timeout_s=2)


def test_postgres_sessions_run_with_the_configured_server_side_limits_and_client_keepalives(pg_url):
    engine = make_engine(pg_url, FAST)
    try:
        with engine.connect() as conn:
            assert conn.scalar(text("SHOW idle_in_transaction_session_timeout")) == "2s"
            assert conn.scalar(text("SHOW tcp_keepalives_idle")) == "3"
            assert conn.scalar(text("SHOW tcp_user_timeout")) == "9000"  # milliseconds
            params = conn.connection.dbapi_connection.info.get_parameters()  # type: ignore[union-attr]
            assert params["keepalives"] == "1" and params["keepalives_idle"] == "3"
            assert params["tcp_user_timeout"] == "9000" and params["connect_timeout"] == "5"
    finally:
        engine.dispose()


def test_the_celery_broker_and_the_limiter_open_redis_connections_with_the_configured_links(tmp_path, redis_db):
    from conductor.config.settings import Settings
    from conductor.system import celery_app
    from schedulers.limits import RedisLimiter
    from tests.support.pools import scripted_pool

    settings = Settings(home=tmp_path, broker_url=redis_db, redis_socket_timeout_s=3, tcp_keepalive_idle_s=4)
    with celery_app(settings).connection_for_write() as conn:
        kwargs = conn.default_channel.client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == 3 and kwargs["socket_keepalive"] is True
    assert kwargs["socket_keepalive_options"][socket.TCP_KEEPIDLE] == 4
    limiter = RedisLimiter(redis_db, scripted_pool("http://127.0.0.1:9/v1"), links=settings.links)
    assert limiter.client.connection_pool.connection_kwargs["socket_timeout"] == 3
    assert limiter._storage.storage.connection_pool.connection_kwargs["socket_timeout"] == 3


HOLDER = textwrap.dedent(
    """
    import sys, time
    from sqlalchemy import text
    from conductor.config.connections import Links
    from conductor.store.db import make_engine

    engine = make_engine(sys.argv[1], Links(pg_idle_in_transaction_timeout_s=float(sys.argv[2])))
    conn = engine.connect()
    conn.execute(text("SELECT id FROM lease_rows WHERE id = 1 FOR UPDATE"))
    print("locked", flush=True)
    time.sleep(3600)
    """
)


def _hold_row_then_freeze(pg_url: str, idle_timeout_s: float) -> subprocess.Popen[str]:
    """A client that locks row 1 inside a transaction and is then SIGSTOPped: its kernel still
    acknowledges TCP, so only PostgreSQL's idle-in-transaction limit can end it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, pg_url, str(idle_timeout_s)], stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    holder.send_signal(signal.SIGSTOP)
    return holder


@pytest.mark.parametrize("idle_timeout_s", [2.0, 0.0], ids=["limited", "unlimited"])
def test_a_row_locked_by_a_client_that_froze_mid_transaction_is_free_again_within_the_limit(pg_url, idle_timeout_s):
    engine = make_engine(pg_url, FAST)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE lease_rows (id int PRIMARY KEY)"))
        conn.execute(text("INSERT INTO lease_rows VALUES (1)"))
    holder = _hold_row_then_freeze(pg_url, idle_timeout_s)
    try:
        started = time.monotonic()
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL lock_timeout = '6s'"))
            if idle_timeout_s == 0:
                with pytest.raises(OperationalError, match="lock timeout"):
                    conn.execute(text("SELECT id FROM lease_rows WHERE id = 1 FOR UPDATE"))
                return
            conn.execute(text("SELECT id FROM lease_rows WHERE id = 1 FOR UPDATE"))
        waited = time.monotonic() - started
        assert waited < idle_timeout_s + 2.5, f"the lock came free after {waited:.1f}s"
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait(10)
        engine.dispose()


@pytest.mark.parametrize("hardened", [True, False], ids=["hardened", "library-defaults"])
def test_a_redis_call_to_a_frozen_server_fails_within_the_read_timeout_instead_of_hanging(hardened):
    import redis

    if missing := services_missing():
        pytest.skip(missing)
    server = PrivateRedis()
    server.start()
    client = redis.Redis.from_url(server.url, **(FAST.redis_kwargs() if hardened else {}))
    client.ping()
    outcome: list[BaseException | str] = []

    def call() -> None:
        try:
            client.set("k", "v")
            outcome.append("answered")
        except redis.RedisError as exc:
            outcome.append(exc)

    assert server.proc is not None
    server.proc.send_signal(signal.SIGSTOP)  # the process lives, its port is open, nothing answers
    try:
        caller = threading.Thread(target=call, daemon=True)
        started = time.monotonic()
        caller.start()
        caller.join(timeout=FAST.redis_socket_timeout_s + 3)
        if hardened:
            assert outcome and isinstance(outcome[0], redis.TimeoutError), outcome
            assert time.monotonic() - started < FAST.redis_socket_timeout_s + 1.5
        else:
            assert caller.is_alive() and not outcome  # the wait a partition causes without a timeout
    finally:
        server.proc.send_signal(signal.SIGCONT)
        server.stop()
        client.close()
