"""GIDs (IPv6, or IPv4-mapped for IPv4 hosts) and picking an interface's IPv6 address for the socket port."""

from __future__ import annotations

import pytest

from sw.roce.wire.gid import GidError, gid_of, interface_ipv6, ip_of_gid, ip_version, path_mtu_headroom_bytes

pytestmark = pytest.mark.unit

TABLE = """\
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
fd780000000000000000000000000009 04 40 00 c0     eth0
fd780000000000000000000000000002 04 40 00 82     eth0
fd790000000000000000000000000001 05 40 00 80     eth1
00000000000000000000000000000001 01 80 10 80       lo
"""


def test_ipv4_maps_to_an_ipv4_mapped_gid_and_back():
    assert gid_of("10.0.0.7") == "::ffff:a00:7"
    assert ip_of_gid("::ffff:a00:7") == "10.0.0.7"
    assert ip_of_gid("10.0.0.7") == "10.0.0.7"
    assert gid_of("FD78::0001") == "fd78::1" and ip_of_gid("fd78::1") == "fd78::1"
    assert (ip_version("::ffff:10.0.0.7"), ip_version("fd78::1")) == (4, 6)
    assert (path_mtu_headroom_bytes("10.0.0.7"), path_mtu_headroom_bytes("fe80::1")) == (0, 20)


def test_bad_gid_is_a_user_error():
    with pytest.raises(GidError, match="'fd78::zz'"):
        ip_of_gid("fd78::zz")
    assert GidError.is_user_error


def test_interface_ipv6_prefers_global_and_skips_tentative():
    # fd78::9 is still tentative (flag 0x40): the usable ULA fd78::2 wins over the link-local address.
    assert interface_ipv6("eth0", table=TABLE) == "fd78::2"
    assert interface_ipv6("eth1", table=TABLE) == "fd79::1"
    only_ll = TABLE.splitlines()[0]
    assert interface_ipv6("eth0", table=only_ll) == "fe80::fc:ff:fe00:1"
    with pytest.raises(GidError, match="'eth9' has no usable IPv6 address"):
        interface_ipv6("eth9", table=TABLE)
