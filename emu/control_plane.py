"""The fabric control plane: derives every table entry of ``p4/programs/fabric.p4`` from the topology.

Output is simple_switch_CLI command text per switch, so the same commands program the embedded target and
BMv2 ``simple_switch`` alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from sw.collectives.fabric_topology import CNP_PRIORITY, Topology, TopologyError, switch_port_mac
from sw.roce.wire.flow import DSCP_CNP_DEFAULT, DSCP_ROCE_DEFAULT
from sw.roce.wire.gid import fabric_ipv6, fabric_ipv6_prefix_len
from sw.roce.wire.int_md import DSCP_INT

ROCE_UDP_PORT = 4791
REPORT_MIRROR_SESSION = 250
PMAX_SCALE = 1 << 16
OPS_INT_REPORT_EVERY = 64
"""Host mode with operations telemetry on: the sink leaf reports one INT packet in this many of each flow to the
collector (report mode reports every one): ~1.6 % more packets through the sink leaves' pipelines."""


@dataclass(frozen=True)
class EcnConfig:
    """RED-style ECN marking per egress port: none below kmin, linear to pmax at kmax, always above kmax."""

    kmin: int = 5
    kmax: int = 20
    pmax: float = 0.2
    unit: str = "pkts"  # "pkts" or "bytes"

    def __post_init__(self) -> None:
        if self.unit not in ("pkts", "bytes"):
            raise TopologyError(f"--ecn-unit {self.unit!r}: expected pkts or bytes")
        if not 0 <= self.kmin < self.kmax:
            raise TopologyError(f"--ecn-kmin {self.kmin} / --ecn-kmax {self.kmax}: need 0 <= kmin < kmax")
        if not 0.0 < self.pmax <= 1.0:
            raise TopologyError(f"--ecn-pmax {self.pmax}: must be within (0, 1]")

    @property
    def pmax_q16(self) -> int:
        return min(PMAX_SCALE, int(round(self.pmax * PMAX_SCALE)))


@dataclass(frozen=True)
class IntConfig:
    """Which flows carry INT and what the last hop does: ``host`` leaves the stack, ``report`` strips it.

    With a ``collector_port`` the sink leaves also clone reports to it: every INT packet in report mode, one in
    ``report_every`` per flow in host mode (operations telemetry; the receiver keeps its stack for HPCC)."""

    enabled: bool = True
    sink_mode: str = "host"  # "host" or "report"
    udp_dst_port: int = ROCE_UDP_PORT
    collector_port: int | None = None  # switch port of the collector (report mode, or host mode with ops on)
    report_every: int | None = None    # INT packets per flow per report (default 1 in report mode, else
                                       # OPS_INT_REPORT_EVERY)

    def __post_init__(self) -> None:
        if self.sink_mode not in ("host", "report"):
            raise TopologyError(f"--int-sink {self.sink_mode!r}: expected host or report")
        if self.sink_mode == "report" and self.collector_port is None:
            raise TopologyError("--int-sink report needs a collector port")
        if self.report_every is not None and not 1 <= self.report_every < 2**32:
            raise TopologyError(f"INT report_every {self.report_every}: must be within 1..{2**32 - 1}")

    @property
    def reports_every(self) -> int:
        """INT packets of a flow per report the sink clones to the collector (0: no collector, no reports)."""
        if self.collector_port is None:
            return 0
        if self.report_every is not None:
            return self.report_every
        return 1 if self.sink_mode == "report" else OPS_INT_REPORT_EVERY


def switch_commands(topo: Topology, switch: str, ecn: EcnConfig | None = None,
                    int_cfg: IntConfig | None = None) -> list[str]:
    """simple_switch_CLI commands that program one switch of the fabric."""
    ecn = ecn or EcnConfig()
    int_cfg = int_cfg or IntConfig()
    sw = topo.switch(switch)
    cmds = [f"table_set_default FabricEgress.switch_config set_switch {sw.device_id}"]
    ports = topo.ports_of(switch)
    for port in ports:
        cmds.append(f"table_add FabricEgress.port_mac set_port_mac {port} => {switch_port_mac(sw.device_id, port)}")
    red_action = "set_red" if ecn.unit == "pkts" else "set_red_bytes"
    for port in ports:
        cmds.append(f"table_add FabricEgress.ecn_config {red_action} {port} => {ecn.kmin} {ecn.kmax} {ecn.pmax_q16}")
    group = 1
    for route in topo.routes(switch):
        # every route twice: its IPv4 prefix and the same prefix in the fabric's IPv6 plan (sw.roce.wire.gid)
        prefixes = (("ipv4_lpm", f"{route.prefix}/{route.prefix_len}"),
                    ("ipv6_lpm", f"{fabric_ipv6(route.prefix)}/{fabric_ipv6_prefix_len(route.prefix_len)}"))
        if len(route.ports) == 1:
            for table, prefix in prefixes:
                cmds.append(f"table_add FabricIngress.{table} forward {prefix} => {route.ports[0]} "
                            f"{route.next_hop_macs[0]}")
            continue
        for table, prefix in prefixes:
            cmds.append(f"table_add FabricIngress.{table} ecmp_select {prefix} => {group} {len(route.ports)}")
        for index, (port, mac) in enumerate(zip(route.ports, route.next_hop_macs, strict=True)):
            cmds.append(f"table_add FabricIngress.ecmp_group set_ecmp_member {group} {index} => {port} {mac}")
        group += 1
    if sw.role == "leaf" and int_cfg.enabled:
        for table in ("int_watchlist", "int_watchlist6"):
            cmds.append(f"table_add FabricIngress.{table} int_source 0&&&0 0&&&0 "
                        f"{int_cfg.udp_dst_port}&&&0xffff => 1")
        if int_cfg.sink_mode == "report" or int_cfg.collector_port is not None:
            strip = int(int_cfg.sink_mode == "report")
            for nic in topo.nics:
                if nic.leaf == switch:
                    cmds.append(f"table_add FabricIngress.int_sink_config int_sink {nic.leaf_port} => {strip} "
                                f"{int_cfg.reports_every}")
            cmds.append(f"mirroring_add {REPORT_MIRROR_SESSION} {int_cfg.collector_port}")
    return cmds


def fabric_commands(topo: Topology, ecn: EcnConfig | None = None,
                    int_cfg: IntConfig | None = None) -> dict[str, list[str]]:
    """Commands for every switch of the fabric, by switch name."""
    return {sw.name: switch_commands(topo, sw.name, ecn, int_cfg) for sw in topo.switches}


def dscp_priority_map(pfc_priority: int) -> dict[int, int | str]:
    """DSCP -> switch priority of a lossless RoCE fabric (as NVIDIA's RoCE default): RoCE data (DSCP 26, the QPs'
    traffic class) -> ``pfc_priority``, CNPs (DSCP 48) -> strict priority 6, INT-carrying packets (fabric.p4's
    DSCP 0x17) by the original DSCP their shim keeps ("int"), every other DSCP -> priority 0, lossy."""
    return {DSCP_ROCE_DEFAULT: pfc_priority, DSCP_CNP_DEFAULT: CNP_PRIORITY, DSCP_INT: "int"}


def qos_commands(pfc_priority: int) -> list[str]:
    """Switch commands programming ``dscp_priority_map`` (the per-port PFC commands come with the thresholds)."""
    return [f"pfc_dscp_map {dscp} {prio}" for dscp, prio in dscp_priority_map(pfc_priority).items()]
