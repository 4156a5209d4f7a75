"""How every Redis and PostgreSQL connection notices a peer that went silent: connect and read
timeouts, TCP keepalives, TCP_USER_TIMEOUT, and server-side limits on a vanished client's transaction.

A host cut off by a network that drops packets (no RST, no FIN) leaves its sockets half-open. Left
to the kernel's defaults, a read on such a socket waits forever, a keepalive probe starts after two
hours and unacknowledged data is retried for ~15 minutes: a Celery consumer hangs on its BRPOP, and
a transaction whose client vanished holds its row locks, stalling every other worker, for as long.
The options here bound each of those waits to seconds. Plain dicts (no client imported here), built
once from `Settings.links` and handed to whoever opens a connection.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Links:
    """Timeouts of the process's network links; the field defaults are the settings' defaults."""

    #: Opening a Redis or PostgreSQL connection (TCP connect and handshake).
    connect_timeout_s: float = 5.0
    #: Longest wait for one Redis reply. Longer than any blocking command we send (kombu's BRPOP
    #: waits 1 s on the server) so that only a dead link trips it.
    redis_socket_timeout_s: float = 15.0
    #: A Redis connection idle this long is PINGed before use; kombu also drops a BRPOP whose reply
    #: is this much overdue, so a consumer on a half-open link reconnects within about twice this.
    redis_health_check_s: float = 10.0
    #: Idle seconds before the first keepalive probe, seconds between probes, unanswered probes
    #: that end the connection: a silent peer of an idle link is found in idle + interval * count.
    tcp_keepalive_idle_s: int = 10
    tcp_keepalive_interval_s: int = 5
    tcp_keepalive_count: int = 3
    #: Data written but not acknowledged this long ends the connection (Linux TCP_USER_TIMEOUT):
    #: a commit sent into a partition fails in seconds instead of ~15 minutes of retransmissions.
    tcp_user_timeout_s: float = 30.0
    #: PostgreSQL ends a session left idle inside a transaction this long, releasing its locks
    #: (a client that vanished mid-transaction, or one stopped in its tracks); 0 disables it.
    pg_idle_in_transaction_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.redis_socket_timeout_s <= 1.0:
            # kombu's BRPOP blocks for 1 s on the server: a shorter read timeout would drop healthy links.
            raise ValueError(f"redis_socket_timeout_s ({self.redis_socket_timeout_s}) must exceed 1 s")

    def tcp_keepalive_options(self) -> dict[int, int]:
        """setsockopt values (IPPROTO_TCP level), as redis-py's `socket_keepalive_options` takes them."""
        return {
            socket.TCP_KEEPIDLE: self.tcp_keepalive_idle_s,
            socket.TCP_KEEPINTVL: self.tcp_keepalive_interval_s,
            socket.TCP_KEEPCNT: self.tcp_keepalive_count,
            socket.TCP_USER_TIMEOUT: int(self.tcp_user_timeout_s * 1000),
        }

    def redis_kwargs(self, *, socket_timeout_s: float | None = None) -> dict[str, Any]:
        """Keyword arguments for `redis.Redis.from_url` (and `limits`' RedisStorage, which passes
        them on); `socket_timeout_s` tightens the read timeout for a caller with a shorter budget."""
        return {
            "socket_timeout": min(socket_timeout_s or self.redis_socket_timeout_s, self.redis_socket_timeout_s),
            "socket_connect_timeout": self.connect_timeout_s,
            "socket_keepalive": True,
            "socket_keepalive_options": self.tcp_keepalive_options(),
            "health_check_interval": self.redis_health_check_s,
        }

    def celery_transport_options(self) -> dict[str, Any]:
        """kombu Redis transport options for the broker (`broker_transport_options`)."""
        return self.redis_kwargs()

    def postgres_connect_args(self) -> dict[str, Any]:
        """libpq parameters for psycopg (`create_engine(connect_args=...)`): the client's side and,
        through `options`, the server's side of the same link."""
        keepalive = (
            f"-c tcp_keepalives_idle={self.tcp_keepalive_idle_s} -c tcp_keepalives_interval={self.tcp_keepalive_interval_s} "
            f"-c tcp_keepalives_count={self.tcp_keepalive_count} -c tcp_user_timeout={int(self.tcp_user_timeout_s * 1000)}"
        )
        idle_tx = f"-c idle_in_transaction_session_timeout={int(self.pg_idle_in_transaction_timeout_s * 1000)}"
        return {
            "connect_timeout": max(1, round(self.connect_timeout_s)),  # libpq takes whole seconds
            "keepalives": 1,
            "keepalives_idle": self.tcp_keepalive_idle_s,
            "keepalives_interval": self.tcp_keepalive_interval_s,
            "keepalives_count": self.tcp_keepalive_count,
            "tcp_user_timeout": int(self.tcp_user_timeout_s * 1000),
            "options": f"{keepalive} {idle_tx}",
        }


DEFAULT_LINKS = Links()
