"""Where outbound webhooks may go: public unicast addresses, plus what an operator allows.

A tenant chooses its webhook URL, and a worker inside the cluster POSTs to it: without this
policy a tenant could make the cluster call its own loopback, private network or cloud metadata
service. The policy judges addresses (after DNS resolution, by the caller) and host names; it
does no network I/O itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: IPv6 prefixes that carry an IPv4 address in their last 32 bits: the IPv4 address is the real
#: destination (NAT64 translates, a stack may route `::a.b.c.d` to IPv4), so it is judged too.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, compatible, 6to4, NAT64), if any."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64 or ip in _COMPATIBLE:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def is_public(ip: IPAddress) -> bool:
    """A globally routable unicast address: not loopback, private, link-local, shared (CGNAT),
    multicast, reserved, documentation or unspecified, in whatever IPv6 form it is written."""
    inner = embedded_ipv4(ip)
    if inner is not None:
        return is_public(inner)
    # `is_global` alone lets multicast through (224/4 and ff00::/8 are "global" in the registry).
    return ip.is_global and not ip.is_multicast


def normal_host(host: str) -> str:
    """A host name as compared with the allow-list: lower case, without DNS's trailing dot, unbracketed."""
    return host.strip().strip("[]").rstrip(".").lower()


@dataclass(frozen=True)
class Destinations:
    """The policy: public addresses, plus the allow-list's networks and host names."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def allowing(cls, entries: Iterable[str]) -> Destinations:
        """From allow-list entries, each a CIDR (`10.0.0.0/8`), an address, or a host name.
        A malformed entry raises ValueError naming it."""
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            name = normal_host(entry)
            if not name or any(c in name for c in "/:@ ") or not all(label for label in name.split(".")):
                raise ValueError(f"{raw!r} is neither a CIDR, an address nor a host name")
            hosts.add(name)
        return cls(tuple(networks), frozenset(hosts))

    def host_allowed(self, host: str) -> bool:
        """The host name is on the allow-list: whatever it resolves to is trusted."""
        return normal_host(host) in self.hosts

    def address_allowed(self, ip: IPAddress) -> bool:
        """A public address, or one inside an allowed network (in its own or its embedded IPv4 form)."""
        if is_public(ip):
            return True
        forms = [ip] + [v4 for v4 in [embedded_ipv4(ip)] if v4 is not None]
        return any(form in net for form in forms for net in self.networks if form.version == net.version)
