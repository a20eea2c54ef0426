"""The simulator's fabric: the links of a ``sw.collectives.fabric_topology.TopologySpec`` as numbered arrays,
and flow paths.

Every physical link is two directed links.  Numbering (G rails, S spines per tier-2 group, M super spines):
per GPU rank r an intra-server pair (GPU -> server switch, switch -> GPU; the NVLink stand-in), per NIC an
up/down pair to its leaf, per (leaf, spine) an up/down pair, and with 3 tiers per (pod spine, super spine) an
up/down pair.  Ranks are numbered server-major (rank = server * G + gpu, ``RankLayout.grid``), GPU g on rail g.

Routing: ``ecmp`` picks a spine (and super spine) by fabric.p4's hash, CRC-16 of (src IP, dst IP, protocol,
UDP source port, UDP destination port) modulo the group size, the same hash at every tier (as the same P4
program does); the UDP source port comes from the QP pair as ``sw.roce`` derives it (QPN = peer rank + 1).
``rail`` is rail-aware: a flow between GPUs on different rails first crosses NVLink to the GPU on the
destination's rail (PXN), and flows leaving a leaf (or a pod spine) are spread round robin over its uplinks,
so no two flows of one phase share an uplink while another is free.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sw.collectives.fabric_topology import TopologySpec
from sw.roce.wire.flow import udp_sport
from sw.units.crc16 import CRC16_TABLE, crc16

LINK_CLASSES = ("nvlink", "host-leaf", "leaf-spine", "spine-super")
ROCE_UDP_PORT = 4791
ROUTINGS = ("ecmp", "rail")
_CRC16_NP = np.asarray(CRC16_TABLE, dtype=np.int64)


@dataclass(frozen=True)
class FlowPaths:
    """Directed links of a set of flows as a sparse flow x link incidence (COO sorted by flow)."""

    flow: np.ndarray      # flow index of each entry
    link: np.ndarray      # link index of each entry
    hops: np.ndarray      # links per flow


def ecmp_index(src_ip: np.ndarray, dst_ip: np.ndarray, sport: np.ndarray, group: int) -> np.ndarray:
    """fabric.p4's ECMP member for each flow: CRC-16 of the 13-byte 5-tuple key, modulo ``group``."""
    cols = [(src_ip >> s) & 0xFF for s in (24, 16, 8, 0)] + [(dst_ip >> s) & 0xFF for s in (24, 16, 8, 0)]
    cols += [np.full_like(src_ip, 17), (sport >> 8) & 0xFF, sport & 0xFF,
             np.full_like(src_ip, ROCE_UDP_PORT >> 8), np.full_like(src_ip, ROCE_UDP_PORT & 0xFF)]
    return crc16(cols, _CRC16_NP) % group


def _round_robin(groups: np.ndarray, width: int) -> np.ndarray:
    """For each item, its order among the items of the same group (stable), modulo ``width``."""
    order = np.argsort(groups, kind="stable")
    g = groups[order]
    starts = np.r_[0, np.flatnonzero(g[1:] != g[:-1]) + 1]
    first = np.repeat(starts, np.diff(np.r_[starts, len(g)]))
    out = np.empty_like(groups)
    out[order] = (np.arange(len(g)) - first) % width
    return out


class SimFabric:
    """Link capacities, latencies and classes of one topology, and the paths of flows between GPU ranks."""

    def __init__(self, spec: TopologySpec, intra_rate_bps: float, delay_s: float, intra_delay_s: float = 0.0):
        self.spec = spec
        self.g = spec.rails
        self.servers = spec.servers
        self.gpus = spec.servers * spec.rails
        self.leaves = spec.pods * spec.rails
        self.s = spec.spines
        self.m = spec.super_spines if spec.tiers == 3 else 0
        self.off_nic = 2 * self.gpus
        self.off_ls = self.off_nic + 2 * self.gpus
        self.off_ss = self.off_ls + 2 * self.leaves * self.s
        self.n_links = self.off_ss + 2 * spec.pods * self.s * self.m
        self.intra_rate_bps = intra_rate_bps
        self.delay_s = delay_s
        self.intra_delay_s = intra_delay_s

    @cached_property
    def link_class(self) -> np.ndarray:
        """Index into ``LINK_CLASSES`` of every directed link."""
        out = np.empty(self.n_links, dtype=np.int8)
        out[:self.off_nic] = 0
        out[self.off_nic:self.off_ls] = 1
        out[self.off_ls:self.off_ss] = 2
        out[self.off_ss:] = 3
        return out

    @cached_property
    def capacity_bps(self) -> np.ndarray:
        rates = np.array([self.intra_rate_bps, self.spec.link_rate_bps, self.spec.uplink_rate_bps,
                          self.spec.super_uplink_rate_bps], dtype=np.float64)
        return rates[self.link_class]

    @cached_property
    def latency_s(self) -> np.ndarray:
        return np.where(self.link_class == 0, self.intra_delay_s, self.delay_s)

    def link_name(self, i: int) -> str:
        """A directed link as ``A>B`` with the topology's node names (``s3-eth1>p0l1``, ``p0l1>sp0``)."""
        spp, g = self.spec.servers_per_pod, self.g
        if i < self.off_nic:
            r, d = divmod(i, 2)
            ends = (f"s{r // g}.gpu{r % g}", f"s{r // g}.nvswitch")
        elif i < self.off_ls:
            r, d = divmod(i - self.off_nic, 2)
            srv = r // g
            ends = (f"s{srv}-eth{r % g}", f"p{srv // spp}l{r % g}")
        elif i < self.off_ss:
            j, d = divmod(i - self.off_ls, 2)
            leaf, k = divmod(j, self.s)
            pod, rail = divmod(leaf, g)
            ends = (f"p{pod}l{rail}", f"p{pod}sp{k}" if self.m else f"sp{k}")
        else:
            j, d = divmod(i - self.off_ss, 2)
            ps, m = divmod(j, self.m)
            ends = (f"p{ps // self.s}sp{ps % self.s}", f"ss{m}")
        return f"{ends[0]}>{ends[1]}" if d == 0 else f"{ends[1]}>{ends[0]}"

    def links_between(self, a: str, b: str) -> np.ndarray:
        """The directed links between nodes ``a`` and ``b``, both ways (names as ``link_name`` spells them: a NIC
        end is ``s1-eth0``); a scan of every link, for the few a hypothesis names."""
        want = {f"{a}>{b}", f"{b}>{a}"}
        return np.array([i for i in range(self.n_links) if self.link_name(i) in want], dtype=np.int64)

    def scale_links(self, shares: tuple[tuple[str, str, float], ...]) -> None:
        """Run the links ``(a, b, share)`` names at ``share`` of their rate (a degraded link); a link not in this
        fabric is a ``ValueError`` naming it."""
        for a, b, share in shares:
            idx = self.links_between(a, b)
            if not len(idx) or not 0 < share <= 1:
                raise ValueError(f"link {a}<->{b} at {share}: not a link of this fabric, or not a share in (0, 1]")
            self.capacity_bps[idx] *= share

    def nic_ip(self, rank: np.ndarray) -> np.ndarray:
        """``sw.collectives.fabric_topology.nic_ip`` as 32-bit integers: 10.<pod>.<rail>.<slot+1>."""
        pod, slot = np.divmod(rank // self.g, self.spec.servers_per_pod)
        return (10 << 24) | (pod << 16) | ((rank % self.g) << 8) | (slot + 1)

    def paths(self, src: np.ndarray, dst: np.ndarray, routing: str) -> FlowPaths:
        """The directed links of flows ``src[i] -> dst[i]`` (GPU ranks, src != dst)."""
        src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
        nf = len(src)
        g, spp = self.g, self.spec.servers_per_pod
        s_srv, d_srv = src // g, dst // g
        same = s_srv == d_srv
        hop_links: list[np.ndarray] = []   # one column per hop position; -1 = no link at that hop
        none = np.full(nf, -1, dtype=np.int64)
        # the NIC a flow leaves by: its own, or (rail routing, other rail) the server's GPU on the dst's rail
        pxn = (~same) & (src % g != dst % g) if routing == "rail" else np.zeros(nf, dtype=bool)
        nic_src = np.where(pxn, s_srv * g + dst % g, src)
        hop_links.append(np.where(same | pxn, 2 * src, none))                       # GPU -> NVSwitch
        hop_links.append(np.where(same | pxn, 2 * np.where(same, dst, nic_src) + 1, none))
        net = ~same
        hop_links.append(np.where(net, self.off_nic + 2 * nic_src, none))            # NIC -> leaf
        a_pod, b_pod = (nic_src // g) // spp, d_srv // spp
        a_leaf, b_leaf = a_pod * g + nic_src % g, b_pod * g + dst % g
        up = net & (a_leaf != b_leaf)
        if up.any() and self.s == 0:
            raise ValueError("a flow between leaves in a rail-only fabric (--spines 0)")
        if routing == "ecmp":
            h = ecmp_index(self.nic_ip(nic_src), self.nic_ip(dst), udp_sport(src + 1, dst + 1), 1 << 16)
            k = h % max(self.s, 1)
            m = h % max(self.m, 1)
            k2 = k
        else:
            k = _round_robin(np.where(up, a_leaf, -1), max(self.s, 1))
            m = _round_robin(np.where(up, a_pod * max(self.s, 1) + k, -1), max(self.m, 1))
            k2 = k
        cross_pod = up & (a_pod != b_pod) & (self.m > 0)
        hop_links.append(np.where(up, self.off_ls + 2 * (a_leaf * self.s + k), none))          # leaf -> spine
        if self.m:
            hop_links.append(np.where(cross_pod, self.off_ss + 2 * ((a_pod * self.s + k) * self.m + m), none))
            hop_links.append(np.where(cross_pod, self.off_ss + 2 * ((b_pod * self.s + k2) * self.m + m) + 1, none))
        hop_links.append(np.where(up, self.off_ls + 2 * (b_leaf * self.s + k2) + 1, none))      # spine -> leaf
        hop_links.append(np.where(net, self.off_nic + 2 * dst + 1, none))                       # leaf -> NIC
        mat = np.stack(hop_links, axis=1)
        keep = mat >= 0
        flow = np.repeat(np.arange(nf), keep.sum(axis=1))
        return FlowPaths(flow=flow, link=mat[keep], hops=keep.sum(axis=1))
