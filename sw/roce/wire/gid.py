"""RoCEv2 GIDs and the interface addresses behind them: a GID is an IPv6 address, an IPv4 host appears as the
IPv4-mapped GID ``::ffff:a.b.c.d``.  The socket port needs an interface's IPv6 address (global/ULA before
link-local, never one still in duplicate-address detection) and a UDP socket of the right family on port 4791.

Kept apart from ``sw.roce.softnic.port`` so address-family handling has one home; nic_port only calls it.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

IF_INET6_PATH = Path("/proc/net/if_inet6")  # per network namespace: /proc/net follows the reader's netns
IFA_F_TENTATIVE = 0x40
IFA_F_DADFAILED = 0x08
SCOPE_GLOBAL = 0x00
SCOPE_LINK = 0x20
IPV6_EXTRA_HEADER_BYTES = 20  # an IPv6 header is 40 bytes, IPv4's 20: the path-MTU headroom grows by this
# The emulated fabric's IPv6 plan: each IPv4 address a.b.c.d of the topology is also fd00:5350::a.b.c.d (a ULA
# /96 with the IPv4 address embedded, "SP" = 0x5350), so the control plane routes IPv6 with the IPv4 plan's
# prefixes (+96 bits) and a host needs no kernel IPv6 (the fabric's hosts run with IPv6 off).
FABRIC_IPV6_PREFIX = ipaddress.IPv6Network("fd00:5350::/96")


class GidError(ValueError):
    """An address that is no GID, or an interface without the address family asked for."""

    is_user_error = True


def gid_of(ip: str) -> str:
    """The GID of an IP address: IPv6 as is, IPv4 as the IPv4-mapped IPv6 address (RoCEv2 GID table)."""
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        raise GidError(f"GID {ip!r}: expected an IPv4 or IPv6 address") from None
    if addr.version == 4:
        return str(ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + addr.packed))
    return str(addr)


def ip_of_gid(gid: str) -> str:
    """The IP address the packets carry for ``gid``: an IPv4-mapped GID gives the IPv4 address."""
    try:
        addr = ipaddress.ip_address(gid)
    except ValueError:
        raise GidError(f"GID {gid!r}: expected an IPv6 address (or an IPv4 address)") from None
    if addr.version == 6 and addr.ipv4_mapped is not None:
        return str(addr.ipv4_mapped)
    return str(addr)


def ip_version(ip: str) -> int:
    """4 or 6 for an address (an IPv4-mapped GID counts as IPv4)."""
    return ipaddress.ip_address(ip_of_gid(ip)).version


def fabric_ipv6(ipv4: str) -> str:
    """The fabric's IPv6 address of an IPv4 address (or prefix base): FABRIC_IPV6_PREFIX + the 32 bits."""
    try:
        addr = ipaddress.IPv4Address(ipv4)
    except ValueError:
        raise GidError(f"{ipv4!r}: expected an IPv4 address to embed in {FABRIC_IPV6_PREFIX}") from None
    return str(FABRIC_IPV6_PREFIX.network_address + int(addr))


def fabric_ipv6_prefix_len(ipv4_prefix_len: int) -> int:
    """The IPv6 prefix length of an IPv4 prefix of the fabric's plan (the /96 plus the IPv4 bits)."""
    return FABRIC_IPV6_PREFIX.prefixlen + ipv4_prefix_len


def interface_ipv6(ifname: str, *, table: str | None = None) -> str:
    """The IPv6 address of ``ifname`` a RoCE NIC uses: a global/ULA one if any, else its link-local one.

    ``table`` is the text of /proc/net/if_inet6 (read from the calling thread's namespace when None).
    """
    text = IF_INET6_PATH.read_text() if table is None else table
    best: tuple[int, str] | None = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 6 or fields[5] != ifname:
            continue
        flags, scope = int(fields[4], 16), int(fields[3], 16)
        if flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED) or scope not in (SCOPE_GLOBAL, SCOPE_LINK):
            continue
        rank = 0 if scope == SCOPE_GLOBAL else 1
        addr = str(ipaddress.IPv6Address(bytes.fromhex(fields[0])))
        if best is None or rank < best[0]:
            best = (rank, addr)
    if best is None:
        raise GidError(
            f"interface {ifname!r} has no usable IPv6 address (none, or still in duplicate address detection)"
        )
    return best[1]


def udp_family(ip: str) -> int:
    """AF_INET or AF_INET6 for a UDP socket on ``ip``."""
    return socket.AF_INET6 if ipaddress.ip_address(ip).version == 6 else socket.AF_INET


def udp_bind_address(ip: str, ifname: str, port: int) -> tuple:
    """The ``bind`` address of a UDP socket on ``ip`` (a link-local IPv6 address needs its interface)."""
    addr = ipaddress.ip_address(ip)
    if addr.version == 4:
        return (ip, port)
    scope_id = socket.if_nametoindex(ifname) if addr.is_link_local else 0
    return (ip, port, 0, scope_id)


def path_mtu_headroom_bytes(ip: str) -> int:
    """Bytes an IP version adds beyond the IPv4 headroom ``sw.roce.softnic.port`` assumes (0 or 20)."""
    return IPV6_EXTRA_HEADER_BYTES if ip_version(ip) == 6 else 0
