"""INT hop records as evidence: per switch egress port, the healthy hop latency and queue occupancy of the
calibration steps, and for a suspect's place (a link, a switch port, a NIC's link) the hop whose latency or queue
grew against them in the window.  Evidence only: it never adds, removes or re-ranks a suspect."""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

INT_GROWTH = 3.0
"""A hop's p90 latency or deepest queue this many times its healthy level (or its floor) grew."""
INT_LATENCY_FLOOR_NS = 20_000
"""Healthy latencies below this (network ns) count as this: a quantum of the switches' microsecond stamps times
a few packets, so an idle port's 0 us does not make any queue look grown."""
INT_QUEUE_FLOOR_PKTS = 2
INT_QUEUE_MIN_PKTS = 4
"""A queue must reach this many packets in the window to have grown."""

PortKey = tuple[str, int]


@dataclass(frozen=True)
class IntLevel:
    """A switch egress port's healthy INT levels: p90 hop latency (network ns), deepest queue, samples."""

    latency_p90_ns: float
    queue_max_pkts: int
    samples: int


def _p90(values: list[int]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1] if len(values) > 1 else float(values[0])


def _by_port(rows: list[dict[str, Any]]) -> dict[PortKey, list[dict[str, Any]]]:
    out: dict[PortKey, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[(r["switch"], r["egress_port"])].append(r)
    return out


def int_levels(rows: list[dict[str, Any]]) -> dict[PortKey, IntLevel]:
    """Healthy levels per (switch, egress port) from the calibration window's hop records."""
    return {key: IntLevel(_p90([r["hop_latency_ns"] for r in rs]), max(r["queue_pkts"] for r in rs), len(rs))
            for key, rs in _by_port(rows).items()}


def place_ports(links: list[dict[str, Any]], place: str) -> list[tuple[PortKey, str]]:
    """The switch egress ports a place's traffic leaves by, each with the node it faces: both ends of a link
    ``a<->b`` that are switches, a switch port ``sw port N``, or the leaf port toward a NIC ``s1-eth0``."""
    if " port " in place:
        sw, _, port = place.partition(" port ")
        return [((sw, int(port)), "")] if port.isdigit() else []
    out = []
    for lk in links:
        ends = {lk["a"], lk["b"]}
        if ("<->" in place and set(place.split("<->")) == ends) or lk.get("a_ifname") == place:
            if lk.get("kind") != "host-leaf":          # a switch at both ends: both directions
                out.append(((lk["a"], lk["a_port"]), lk["b"]))
            out.append(((lk["b"], lk["b_port"]), lk["a"]))
    return out


def grown_hops(levels: dict[PortKey, IntLevel], rows: list[dict[str, Any]], links: list[dict[str, Any]],
               place: str) -> list[str]:
    """Evidence lines: each egress port of ``place`` whose INT hop latency or queue grew in the window's
    ``rows`` against its healthy ``levels`` (none when the window holds no INT records there)."""
    by_port = _by_port(rows)
    out = []
    for key, facing in place_ports(links, place):
        rs = by_port.get(key)
        if not rs:
            continue
        base = levels.get(key)
        lat = _p90([r["hop_latency_ns"] for r in rs])
        queue = max(r["queue_pkts"] for r in rs)
        base_lat = base.latency_p90_ns if base else 0.0
        base_q = base.queue_max_pkts if base else 0
        lat_grew = lat >= INT_GROWTH * max(base_lat, INT_LATENCY_FLOOR_NS)
        q_grew = queue >= INT_QUEUE_MIN_PKTS and queue >= INT_GROWTH * max(base_q, INT_QUEUE_FLOOR_PKTS)
        if not (lat_grew or q_grew):
            continue
        healthy = (f"healthy p90 {base_lat / 1e3:.0f} us, max {base_q} pkts over {base.samples} samples"
                   if base else "no healthy samples there")
        out.append(f"INT: {key[0]} port {key[1]}" + (f" (toward {facing})" if facing else "")
                   + f": hop latency p90 {lat / 1e3:.0f} us, max {max(r['hop_latency_ns'] for r in rs) / 1e3:.0f} us, "
                   f"queue up to {queue} pkts in {len(rs)} sampled packets ({healthy}): "
                   + " and ".join(w for w, g in (("latency", lat_grew), ("queue", q_grew)) if g) + " grew")
    return out
