"""Connection hardening, as settings: every timeout and keepalive is a CONDUCTOR_* variable with a
bounded default, and the options handed to Redis and PostgreSQL clients carry them."""

from __future__ import annotations

import socket

import pytest
from pydantic import ValidationError

from conductor.config.connections import DEFAULT_LINKS, Links
from conductor.config.settings import Settings


def test_by_default_a_silent_peer_is_found_in_well_under_a_minute_not_tcps_quarter_hour():
    links = Settings().links
    assert links == DEFAULT_LINKS
    idle_link = links.tcp_keepalive_idle_s + links.tcp_keepalive_interval_s * links.tcp_keepalive_count
    assert idle_link <= 30 and links.tcp_user_timeout_s <= 30 and links.redis_socket_timeout_s <= 30
    assert 0 < links.pg_idle_in_transaction_timeout_s <= 60


def test_each_timeout_is_a_setting_read_from_the_environment(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_TCP_KEEPALIVE_IDLE_S", "3")
    monkeypatch.setenv("CONDUCTOR_PG_IDLE_IN_TRANSACTION_TIMEOUT_S", "7.5")
    monkeypatch.setenv("CONDUCTOR_REDIS_SOCKET_TIMEOUT_S", "4")
    links = Settings().links
    assert (links.tcp_keepalive_idle_s, links.pg_idle_in_transaction_timeout_s) == (3, 7.5)
    assert links.redis_kwargs()["socket_timeout"] == 4


def test_a_redis_read_timeout_a_healthy_brpop_could_trip_is_rejected():
    with pytest.raises(ValidationError, match="redis_socket_timeout_s"):
        Settings(redis_socket_timeout_s=1)
    with pytest.raises(ValueError, match="must exceed 1 s"):
        Links(redis_socket_timeout_s=0.5)


def test_redis_clients_get_timeouts_keepalives_and_a_user_timeout_and_a_caller_may_only_tighten_the_read():
    links = Links(tcp_keepalive_idle_s=4, tcp_keepalive_interval_s=2, tcp_keepalive_count=5, tcp_user_timeout_s=9)
    kw = links.redis_kwargs()
    assert kw["socket_keepalive"] is True and kw["socket_connect_timeout"] == links.connect_timeout_s
    assert kw["socket_keepalive_options"] == {
        socket.TCP_KEEPIDLE: 4,
        socket.TCP_KEEPINTVL: 2,
        socket.TCP_KEEPCNT: 5,
        socket.TCP_USER_TIMEOUT: 9000,
    }
    assert links.redis_kwargs(socket_timeout_s=2)["socket_timeout"] == 2
    assert links.redis_kwargs(socket_timeout_s=600)["socket_timeout"] == links.redis_socket_timeout_s


def test_postgres_connections_carry_client_keepalives_and_server_side_limits():
    args = Links(
        tcp_keepalive_idle_s=4, tcp_user_timeout_s=9, pg_idle_in_transaction_timeout_s=12
    ).postgres_connect_args()
    assert args["keepalives"] == 1 and args["keepalives_idle"] == 4 and args["tcp_user_timeout"] == 9000
    # The server probes the client too, and ends a transaction its client abandoned.
    assert "-c tcp_keepalives_idle=4" in args["options"] and "-c tcp_user_timeout=9000" in args["options"]
    assert "-c idle_in_transaction_session_timeout=12000" in args["options"]


def test_the_celery_broker_gets_the_same_links_but_the_in_memory_one_nothing(tmp_path):
    from conductor.system import celery_app

    redis_conf = celery_app(Settings(home=tmp_path, broker_url="redis://127.0.0.1:6379/0")).conf
    opts = redis_conf.broker_transport_options
    assert opts["socket_timeout"] == DEFAULT_LINKS.redis_socket_timeout_s and opts["socket_keepalive"] is True
    assert opts["health_check_interval"] == DEFAULT_LINKS.redis_health_check_s
    assert redis_conf.broker_connection_timeout == DEFAULT_LINKS.connect_timeout_s
    memory_opts = celery_app(Settings(home=tmp_path)).conf.broker_transport_options
    assert "socket_timeout" not in memory_opts
