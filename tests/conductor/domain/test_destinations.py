"""Which addresses a webhook may reach: public unicast ones, in whatever form they are written,
plus what the operator's allow-list names."""

from __future__ import annotations

import ipaddress

import pytest

from conductor.domain.destinations import Destinations, is_public

NOT_PUBLIC = [
    "127.0.0.1",
    "127.5.6.7",
    "0.0.0.0",
    "10.1.2.3",
    "172.16.0.1",
    "192.168.1.1",
    "100.64.0.1",  # shared (CGNAT)
    "169.254.169.254",  # cloud metadata, link-local
    "224.0.0.1",  # multicast
    "239.255.255.250",
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "192.0.2.1",  # documentation
    "::1",
    "::",
    "fe80::1",
    "fc00::1",
    "ff02::1",
    "2001:db8::1",
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:10.0.0.1",
    "::127.0.0.1",  # IPv4-compatible
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize("address", NOT_PUBLIC)
def test_inside_addresses_are_not_public(address: str):
    assert not is_public(ipaddress.ip_address(address))
    assert not Destinations().address_allowed(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed_without_a_list(address: str):
    assert Destinations().address_allowed(ipaddress.ip_address(address))


def test_the_allow_list_opens_networks_and_host_names_only():
    policy = Destinations.allowing(["10.0.0.0/8", " 127.0.0.1 ", "Hooks.Corp.", "", "[::1]"])
    assert policy.address_allowed(ipaddress.ip_address("10.9.8.7"))
    assert policy.address_allowed(ipaddress.ip_address("::ffff:10.9.8.7"))  # the same address, mapped
    assert policy.address_allowed(ipaddress.ip_address("127.0.0.1"))
    assert policy.address_allowed(ipaddress.ip_address("::1"))
    assert not policy.address_allowed(ipaddress.ip_address("127.0.0.2"))
    assert not policy.address_allowed(ipaddress.ip_address("192.168.0.1"))
    assert policy.host_allowed("hooks.corp") and policy.host_allowed("HOOKS.corp.")
    assert not policy.host_allowed("other.corp")


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "http://x", "a..b", "user@host"])
def test_a_malformed_allow_list_entry_is_named(entry: str):
    with pytest.raises(ValueError, match="neither a CIDR"):
        Destinations.allowing([entry])
