"""HTTP requests to tenant-chosen URLs (webhooks) that reach public addresses only.

The check happens where the socket is opened: httpx asks its network backend to connect to the
URL's host, and `GuardedBackend` resolves that name once, judges every address it got, and
connects to one of those very addresses. There is no second lookup a rebinding DNS server could
answer differently, and the URL, `Host` header, TLS SNI and certificate check keep the name.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from conductor.config.settings import Settings
from conductor.domain.destinations import Destinations, IPAddress
from conductor.domain.errors import DestinationRefused


def destinations(settings: Settings) -> Destinations:
    return Destinations.allowing(settings.webhook_allow)


def resolve_checked(host: str, port: int, policy: Destinations) -> list[IPAddress]:
    """Every address `host` resolves to, when all of them may be reached; else DestinationRefused.

    One refused address refuses the name: a client may pick any of them (and does, on failover)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise DestinationRefused(f"{host} does not resolve") from exc
    addresses = list(dict.fromkeys(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos))
    if policy.host_allowed(host):
        return addresses
    if not addresses or not all(policy.address_allowed(ip) for ip in addresses):
        raise DestinationRefused(f"{host} is not a public address")
    return addresses


def check_url(url: str, policy: Destinations) -> None:
    """Refuse, before anything is stored, a URL that is not http(s) or leads to no public address.
    The message names the URL's host and the rule, never what an inside name resolved to."""
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise DestinationRefused(f"webhook_url is not a valid URL: {exc}", param="webhook_url") from exc
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise DestinationRefused("webhook_url must be an http:// or https:// URL with a host", param="webhook_url")
    try:
        resolve_checked(parsed.host, parsed.port or (443 if parsed.scheme == "https" else 80), policy)
    except DestinationRefused as exc:
        raise DestinationRefused(
            f"webhook_url {parsed.host!r} must resolve to public addresses only (loopback, private, "
            "link-local, multicast, reserved and unspecified ones are refused; an operator can allow "
            "on-premises receivers with CONDUCTOR_WEBHOOK_ALLOW)",
            param="webhook_url",
        ) from exc


class GuardedBackend(httpcore.SyncBackend):
    """httpcore's socket backend, connecting only to addresses the policy allows."""

    def __init__(self, policy: Destinations) -> None:
        self.policy = policy

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        last: Exception | None = None
        for ip in resolve_checked(host, port, self.policy):
            try:
                return super().connect_tcp(str(ip), port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:  # the next address the name has, as a browser would
                last = exc
        raise last or httpcore.ConnectError(f"{host} has no address")


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport over a `GuardedBackend`. httpx does not take a network backend yet
    (encode/httpx#3749), so the connection pool it built is replaced by one that has ours."""

    def __init__(self, policy: Destinations) -> None:
        super().__init__(trust_env=False)  # a proxy would connect for us, past the check
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False), network_backend=GuardedBackend(policy)
        )


def guarded_client(policy: Destinations, timeout: float) -> httpx.Client:
    """A client for tenant-chosen URLs: guarded connects, no redirects, no proxies from the environment."""
    return httpx.Client(transport=GuardedTransport(policy), follow_redirects=False, trust_env=False, timeout=timeout)
