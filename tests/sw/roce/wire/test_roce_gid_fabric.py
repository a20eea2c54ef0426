"""The fabric's IPv6 plan (an IPv4 address embedded in fd00:5350::/96) and $STARPULSE_NIC_IPV6, which picks the
address family of every NIC a tool opens on a fabric host."""

from __future__ import annotations

import pytest

from sw.roce.softnic import port as nic_port
from sw.roce.wire.gid import GidError, fabric_ipv6, fabric_ipv6_prefix_len, ip_of_gid

pytestmark = pytest.mark.unit


def test_fabric_ipv6_embeds_the_ipv4_address():
    assert fabric_ipv6("10.0.1.2") == "fd00:5350::a00:102"
    assert fabric_ipv6("10.0.0.0") == "fd00:5350::a00:0"
    assert fabric_ipv6_prefix_len(24) == 120 and fabric_ipv6_prefix_len(32) == 128
    assert ip_of_gid(fabric_ipv6("10.3.2.1")) == "fd00:5350::a03:201"  # a real IPv6 GID, not IPv4-mapped


def test_fabric_ipv6_rejects_a_non_ipv4_address():
    with pytest.raises(GidError, match="expected an IPv4 address"):
        fabric_ipv6("fd00::1")


def test_env_nic_ip(monkeypatch):
    monkeypatch.setattr(nic_port, "interface_ipv4", lambda ifname: {"s0-eth0": "10.0.0.1"}[ifname])
    monkeypatch.delenv(nic_port.ENV_NIC_IPV6, raising=False)
    assert nic_port.env_nic_ip("s0-eth0") is None
    monkeypatch.setenv(nic_port.ENV_NIC_IPV6, "fabric")
    assert nic_port.env_nic_ip("s0-eth0") == "fd00:5350::a00:1"
    monkeypatch.setenv(nic_port.ENV_NIC_IPV6, "fd00:1::7")
    assert nic_port.env_nic_ip("s0-eth0") == "fd00:1::7"
    for bad in ("10.0.0.9", "yes"):
        monkeypatch.setenv(nic_port.ENV_NIC_IPV6, bad)
        with pytest.raises(GidError, match="STARPULSE_NIC_IPV6"):
            nic_port.env_nic_ip("s0-eth0")
