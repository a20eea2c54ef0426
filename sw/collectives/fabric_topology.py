"""The rail-optimized leaf/spine topology as data: nodes, links, port numbers and the address plan.

Pure and deterministic (no Mininet here), so the control plane, the fabric builder (``emu``), tests and the
flow-level simulator (``sw.sim``) all derive from this one description.

Scheme (documented in the README too):
- server ``s<i>`` (i = 0..servers-1, ``servers/pods`` per pod) holds one NIC per GPU, ``s<i>-eth<r>`` on rail r;
- leaf ``p<p>l<r>`` is rail r's leaf in pod p; NIC r of every server in pod p connects to it;
- spine ``sp<k>`` connects to every leaf; ``spines=0`` is a rail-only fabric (no spine tier);
- NIC address ``10.<pod>.<rail>.<slot+1>/24`` (slot = server index inside its pod), gateway ``.254`` (the
  leaf), MAC ``02:53:<pod>:<rail>:<slot>:01``; leaf ports 1..servers_per_pod face servers (port = slot+1),
  ports servers_per_pod+1.. face spines k=0..; spine port = pod*rails + rail + 1 faces leaf (pod, rail).
- ``tiers=3`` (simulator only, for 100k-GPU fabrics): each pod has its own ``spines`` pod spines ``p<p>sp<k>``
  (every leaf of the pod connects to each), and every pod spine connects to each of ``super_spines`` super
  spines ``ss<m>``; the pod-spine uplinks carry the pod spine's whole downlink capacity (non-blocking above the
  leaves; ``oversubscription`` applies at the leaf tier as in two tiers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from sw.units import ETH_WIRE_OVERHEAD_BYTES

MAX_SERVERS_PER_POD = 250
MAX_RAILS = 16
MAX_PODS = 200
MAX_SPINES = 64
MAX_MTU = 9216
DEFAULT_FABRIC_MTU = 9000
"""The topology flags' default MTU (every command that brings up a fabric): jumbo frames, as RoCE fabrics for
training run them, so the RoCE path MTU is 4096 (at 1500 it is 1024: 4x the packets per byte, and headers cap
payload at 0.93 of the line); ``Fabric(**flags)`` parses the same flags.  ``TopologySpec`` keeps 1500 for code that
builds one, as the incast and HoL benches do (their published figures are taken at 1500)."""
PFC_PRIORITIES = 8
CNP_PRIORITY = 6     # CNPs' class (DSCP 48): strict priority above RoCE data, never the lossless one
ETH_HEADER_BYTES = 14
MIN_FRAME_BYTES = 60
"""Shortest Ethernet frame without FCS: an RC ACK (62 bytes of headers, AETH and ICRC) is about this size."""


class TopologyError(ValueError):
    """A topology option out of range; the message names the flag, the value and the allowed range."""

    is_user_error = True


@dataclass(frozen=True)
class TopologySpec:
    """The user's topology options (the CLI flags of `starpulse fabric`)."""

    servers: int = 4
    gpus_per_server: int = 2
    pods: int = 1
    spines: int = 2
    link_rate_bps: int = 100_000_000
    delay_ns: int = 0
    mtu: int = 1500
    oversubscription: float = 1.0
    seed: int = 1
    pfc_priority: int | None = None   # the lossless RoCE class with PFC on (hosts and switches); None: no class
    tiers: int = 2                    # 3: pod spines + super spines (the flow-level simulator builds it)
    super_spines: int = 0             # super spines of a 3-tier fabric

    def __post_init__(self) -> None:
        def check(flag: str, value: float, lo: float, hi: float) -> None:
            if not lo <= value <= hi:
                raise TopologyError(f"{flag} {value}: must be within {lo}..{hi}")

        check("--pods", self.pods, 1, MAX_PODS)
        check("--servers", self.servers, 1, MAX_SERVERS_PER_POD * self.pods)
        if self.servers % self.pods:
            raise TopologyError(f"--servers {self.servers}: must be a multiple of --pods {self.pods}")
        check("--gpus-per-server", self.gpus_per_server, 1, MAX_RAILS)
        check("--spines", self.spines, 0, MAX_SPINES)
        if self.pods > 1 and self.spines == 0:
            raise TopologyError(f"--spines 0 with --pods {self.pods}: pods only meet at the spine tier")
        check("--mtu", self.mtu, 576, MAX_MTU)
        check("--tiers", self.tiers, 2, 3)
        if self.tiers == 3:
            if self.spines == 0:
                raise TopologyError("--tiers 3 with --spines 0: a 3-tier fabric needs pod spines")
            check("--super-spines", self.super_spines, 1, MAX_SPINES)
        check("--oversubscription", self.oversubscription, 1.0, 64.0)
        if self.link_rate_bps <= 0:
            raise TopologyError(f"--link-rate {self.link_rate_bps}: must be > 0")
        if self.delay_ns < 0:
            raise TopologyError(f"--delay {self.delay_ns}ns: must be >= 0")
        if self.pfc_priority is not None and (not 0 <= self.pfc_priority < PFC_PRIORITIES
                                              or self.pfc_priority == CNP_PRIORITY):
            raise TopologyError(f"--pfc-priority {self.pfc_priority}: allowed 0..{PFC_PRIORITIES - 1} except "
                                f"{CNP_PRIORITY} (the CNPs' strict-priority class)")

    @property
    def servers_per_pod(self) -> int:
        return self.servers // self.pods

    @property
    def rails(self) -> int:
        return self.gpus_per_server

    @property
    def super_uplink_rate_bps(self) -> int:
        """Pod-spine-to-super-spine link rate (3 tiers): a pod spine's downlink capacity over the super spines."""
        if self.tiers < 3:
            return 0
        return int(self.rails * self.uplink_rate_bps / self.super_spines)

    def base_rtt_ns(self) -> int:
        """Unloaded round trip of the fabric's longest path in network ns: a full frame (``mtu``) stored and
        forwarded over every link out, a shortest frame (the ACK) back, and the per-link ``delay_ns`` both ways.
        HPCC's T must cover it (its window is line rate x T)."""
        rates = [self.link_rate_bps] * 2
        if self.spines:
            rates += [self.uplink_rate_bps] * 2
        if self.tiers >= 3:
            rates += [self.super_uplink_rate_bps] * 2
        out_bits = (self.mtu + ETH_HEADER_BYTES + ETH_WIRE_OVERHEAD_BYTES) * 8
        back_bits = (MIN_FRAME_BYTES + ETH_WIRE_OVERHEAD_BYTES) * 8
        serialize_ns = sum((out_bits + back_bits) * 1e9 / rate for rate in rates)
        return int(round(serialize_ns)) + 2 * len(rates) * self.delay_ns

    @property
    def uplink_rate_bps(self) -> int:
        """Leaf-to-spine link rate giving the requested oversubscription (downlink capacity / uplink capacity)."""
        if self.spines == 0:
            return 0
        return int(self.servers_per_pod * self.link_rate_bps / (self.spines * self.oversubscription))


@dataclass(frozen=True)
class FabricNic:
    """One GPU's NIC: a host interface on rail ``rail`` with its address and the leaf port it plugs into."""

    server: str
    rail: int
    pod: int
    slot: int
    ifname: str
    ip: str
    mac: str
    prefix_len: int
    gateway_ip: str
    gateway_mac: str
    leaf: str
    leaf_port: int


@dataclass(frozen=True)
class Switch:
    name: str
    role: str  # "leaf" or "spine"
    device_id: int
    pod: int | None = None
    rail: int | None = None


@dataclass(frozen=True)
class LinkSpec:
    """A physical link: endpoint ``a`` (node, port) to ``b`` (node, port); ports are 0 on hosts."""

    a: str
    a_port: int
    a_ifname: str
    b: str
    b_port: int
    b_ifname: str
    rate_bps: int
    delay_ns: int
    kind: str  # "host-leaf" or "leaf-spine"


@dataclass(frozen=True)
class Route:
    """One forwarding entry of a switch: packets to ``prefix/prefix_len`` leave by one of ``ports`` (ECMP)."""

    prefix: str
    prefix_len: int
    ports: tuple[int, ...]
    next_hop_macs: tuple[str, ...] = field(default=())


def nic_ip(pod: int, rail: int, slot: int) -> str:
    return f"10.{pod}.{rail}.{slot + 1}"


def nic_mac(pod: int, rail: int, slot: int) -> str:
    return f"02:53:{pod:02x}:{rail:02x}:{slot:02x}:01"


def switch_port_mac(device_id: int, port: int) -> str:
    return f"02:5e:{(device_id >> 8) & 0xff:02x}:{device_id & 0xff:02x}:{(port >> 8) & 0xff:02x}:{port & 0xff:02x}"


class Topology:
    """Every node, link and address of a rail-optimized fabric built from a ``TopologySpec``."""

    def __init__(self, spec: TopologySpec) -> None:
        if spec.tiers != 2:
            raise TopologyError(f"--tiers {spec.tiers}: the emulated fabric has 2 tiers (3 tiers: starpulse sim)")
        self.spec = spec

    # --- nodes --------------------------------------------------------------------------------------------
    @cached_property
    def servers(self) -> list[str]:
        return [f"s{i}" for i in range(self.spec.servers)]

    @cached_property
    def leaves(self) -> list[Switch]:
        out = []
        for pod in range(self.spec.pods):
            for rail in range(self.spec.rails):
                out.append(Switch(f"p{pod}l{rail}", "leaf", 1 + pod * self.spec.rails + rail, pod, rail))
        return out

    @cached_property
    def spines(self) -> list[Switch]:
        base = 1 + self.spec.pods * self.spec.rails
        return [Switch(f"sp{k}", "spine", base + k) for k in range(self.spec.spines)]

    @cached_property
    def switches(self) -> list[Switch]:
        return self.leaves + self.spines

    def switch(self, name: str) -> Switch:
        for sw in self.switches:
            if sw.name == name:
                return sw
        raise KeyError(name)

    def leaf_of(self, pod: int, rail: int) -> Switch:
        return self.leaves[pod * self.spec.rails + rail]

    def uplink_port(self, spine_index: int) -> int:
        return self.spec.servers_per_pod + 1 + spine_index

    def spine_port(self, pod: int, rail: int) -> int:
        return pod * self.spec.rails + rail + 1

    @cached_property
    def nics(self) -> list[FabricNic]:
        out = []
        spp = self.spec.servers_per_pod
        for i, server in enumerate(self.servers):
            pod, slot = divmod(i, spp)
            for rail in range(self.spec.rails):
                leaf = self.leaf_of(pod, rail)
                out.append(FabricNic(
                    server=server, rail=rail, pod=pod, slot=slot, ifname=f"{server}-eth{rail}",
                    ip=nic_ip(pod, rail, slot), mac=nic_mac(pod, rail, slot), prefix_len=24,
                    gateway_ip=f"10.{pod}.{rail}.254", gateway_mac=switch_port_mac(leaf.device_id, slot + 1),
                    leaf=leaf.name, leaf_port=slot + 1,
                ))
        return out

    def nics_of(self, server: str) -> list[FabricNic]:
        return [n for n in self.nics if n.server == server]

    # --- links --------------------------------------------------------------------------------------------
    @cached_property
    def links(self) -> list[LinkSpec]:
        spec = self.spec
        out = [
            LinkSpec(n.server, 0, n.ifname, n.leaf, n.leaf_port, f"{n.leaf}-eth{n.leaf_port}",
                     spec.link_rate_bps, spec.delay_ns, "host-leaf")
            for n in self.nics
        ]
        for leaf in self.leaves:
            for k, spine in enumerate(self.spines):
                lp, sp = self.uplink_port(k), self.spine_port(leaf.pod or 0, leaf.rail or 0)
                out.append(LinkSpec(leaf.name, lp, f"{leaf.name}-eth{lp}", spine.name, sp, f"{spine.name}-eth{sp}",
                                    spec.uplink_rate_bps, spec.delay_ns, "leaf-spine"))
        return out

    def ports_of(self, switch: str) -> dict[int, str]:
        """Port number -> interface name of one switch."""
        ports: dict[int, str] = {}
        for link in self.links:
            if link.a == switch:
                ports[link.a_port] = link.a_ifname
            if link.b == switch:
                ports[link.b_port] = link.b_ifname
        return dict(sorted(ports.items()))

    # --- routing ------------------------------------------------------------------------------------------
    def routes(self, switch: str) -> list[Route]:
        """The forwarding entries of one switch: host /32s on leaves, rail /24s up via ECMP or down on spines."""
        sw = self.switch(switch)
        out: list[Route] = []
        if sw.role == "leaf":
            for nic in self.nics:
                if nic.leaf == sw.name:
                    out.append(Route(nic.ip, 32, (nic.leaf_port,), (nic.mac,)))
            if self.spines:
                up = tuple(self.uplink_port(k) for k in range(len(self.spines)))
                macs = tuple(switch_port_mac(s.device_id, self.spine_port(sw.pod or 0, sw.rail or 0))
                             for s in self.spines)
                out.append(Route("10.0.0.0", 8, up, macs))
        else:
            for leaf in self.leaves:
                port = self.spine_port(leaf.pod or 0, leaf.rail or 0)
                k = self.spines.index(sw)
                mac = switch_port_mac(leaf.device_id, self.uplink_port(k))
                out.append(Route(f"10.{leaf.pod}.{leaf.rail}.0", 24, (port,), (mac,)))
        return out

    def path_switch_hops(self, src: FabricNic, dst: FabricNic) -> int:
        """Switches a packet crosses from ``src`` to ``dst``: 1 on the same leaf, 3 via a spine, 0 = unreachable."""
        if src.leaf == dst.leaf:
            return 1
        return 3 if self.spines else 0

    def reachable_pairs(self) -> list[tuple[FabricNic, FabricNic]]:
        return [(a, b) for a in self.nics for b in self.nics
                if a is not b and self.path_switch_hops(a, b) > 0]
