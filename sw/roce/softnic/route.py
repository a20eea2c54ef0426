"""Where a NIC's frames go, as a verbs application resolves it (rdma_cm's address and route resolution): the
interface of this namespace holding an address, and the destination MAC of frames to a peer (the next hop's
neighbour entry from the kernel's routes).  Adapter around iproute2: the rest of ``sw.roce`` takes MACs as given.
"""

from __future__ import annotations

import json
import socket
import subprocess

from sw.clock import Clock, get_clock
from sw.roce.softnic.port import NicPortError, interface_ipv4

NEXT_HOP_POLL_NS = 20_000_000


class RouteError(NicPortError):
    """No interface holds the address, or the next hop's MAC did not appear in time; says which."""


def interface_of(addr: str) -> str:
    """The interface of this namespace that holds IPv4 ``addr`` (e.g. a rank's ``$STARPULSE_NIC_ADDR``)."""
    for _, name in socket.if_nameindex():
        try:
            if interface_ipv4(name) == addr:
                return name
        except NicPortError:
            continue
    raise RouteError(f"NIC address {addr!r}: no interface here has it (give the IPv4 address of one of this "
                     "host's NICs)")


def _ip_json(*argv: str) -> list[dict[str, object]]:
    try:
        out = subprocess.run(["ip", "-j", *argv], capture_output=True, text=True, timeout=5, check=False).stdout
        return json.loads(out or "[]")
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []


def _neighbour_mac(ip: str, ifname: str) -> str | None:
    for entry in _ip_json("neigh", "show", "to", ip, "dev", ifname):
        mac = entry.get("lladdr")
        if isinstance(mac, str) and mac:
            return mac
    return None


def next_hop_mac(dest_ip: str, src_ip: str, ifname: str, peer_mac: str, timeout_s: float = 2.0,
                 clock: Clock | None = None) -> str:
    """Destination MAC of our frames to ``dest_ip``, as a RoCE NIC resolves a GID: the neighbour entry of the
    next hop from the kernel's routes (a fabric's gateway, or the static entry it maps a peer to), else the
    peer's own MAC ``peer_mac`` when it is on-link.  Waits up to ``timeout_s`` wall seconds for the kernel to
    resolve a gateway (RouteError after that)."""
    routes = _ip_json("route", "get", dest_ip, "from", src_ip, "oif", ifname)
    gateway = routes[0].get("gateway") if routes else None
    hop = gateway if isinstance(gateway, str) else dest_ip
    mac = _neighbour_mac(hop, ifname)
    if mac is not None:
        return mac
    if hop == dest_ip:
        return peer_mac
    clock = clock or get_clock()
    end_ns = clock.now_ns() + clock.net_duration_ns(timeout_s * 1e9)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:  # one datagram makes the kernel ARP
        try:
            probe.bind((src_ip, 0))
            probe.sendto(b"", (dest_ip, 9))
        except OSError:
            pass  # unreachable: the error below names the gateway that never answered
    while (mac := _neighbour_mac(hop, ifname)) is None:
        if clock.now_ns() >= end_ns:
            raise RouteError(f"timed out after {timeout_s:g} s waiting for the MAC of gateway {hop} on {ifname} "
                             f"(route to {dest_ip})")
        clock.sleep_ns(clock.net_duration_ns(NEXT_HOP_POLL_NS))
    return mac
