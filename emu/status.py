"""``Fabric.status()``: per switch port, per link and direction, and in total — packets, bytes, queue depth and
high-water marks, ECN marks, drops by cause and place — read through each switch's control socket; the hosts'
NIC and UDP socket drops from their network namespaces' ``/proc/<pid>/net``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from p4.switch.control import ControlAddressError
from sw.collectives.fabric_topology import TopologySpec

if TYPE_CHECKING:
    from emu.fabric import Fabric

DROP_REASONS = {0: "no_route", 1: "ttl", 2: "parser", 3: "acl"}   # fabric.p4's drop_reasons counter indexes
_COUNTER_RE = re.compile(r"packets=(\d+), bytes=(\d+)")


def fabric_status(fab: Fabric) -> dict[str, Any]:
    """Per switch and port: rx/tx counters, queue depth and high-water mark, ECN marks, drops by cause."""
    out: dict[str, Any] = {"topology": spec_dict(fab.spec), "backend": fab.backend, "switches": {},
                           # where INT ends: host (the receivers keep it; HPCC's input), report (stripped), off
                           "int_sink": fab.int_cfg.sink_mode if fab.int_cfg.enabled else "off"}
    totals = {"rx_pkts": 0, "tx_pkts": 0, "ecn_marks": 0, "drops": 0, "queue_drop_pkts": 0, "rx_kernel_drops": 0,
              "pipeline_drop_pkts": 0, "host_drops": 0}
    peers = _port_peers(fab)
    for name, sw in fab.net.switches.items():
        entry = _switch_status(fab, name, sw, peers.get(name, {}))
        out["switches"][name] = entry
        for p in entry["ports"].values():
            totals["rx_pkts"] += p["rx_pkts"]
            totals["tx_pkts"] += p["tx_pkts"]
            totals["ecn_marks"] += p["ecn_marks"]
            totals["queue_drop_pkts"] += p["queue_drop_pkts"]
            totals["rx_kernel_drops"] += p["rx_kernel_drops"]
            totals["pipeline_drop_pkts"] += p["pipeline_drop_pkts"]
        totals["drops"] += sum(entry["drop_reasons"].values()) + sum(
            p["queue_drop_pkts"] for p in entry["ports"].values())
    out["hosts"] = host_drops(fab)
    totals["host_drops"] = sum(h["udp_rcvbuf_errors"] + sum(n["rx_dropped"] for n in h["nics"].values())
                               for h in out["hosts"].values())
    out["totals"] = totals
    out["links"] = _link_status(fab, out["switches"])
    out["faults"] = fab.faults.active() if fab.faults else {}
    out["fidelity"] = fab.fidelity()
    out["lag_dir"] = str(fab.lag_dir) if fab.lag_dir else None   # where the fabric's processes report lag
    out["straggler_dir"] = str(fab.faults.straggler_dir) if fab.faults else None   # slow_gpu's compute factors
    collector = getattr(fab, "collector", None)   # operations telemetry: the run's store, when ops is on
    out["telemetry_db"] = str(collector.store.path) if collector is not None else None
    return out


def _link_status(fab: Fabric, switches: dict[str, Any]) -> list[dict[str, Any]]:
    """Per link and direction, from the switch port that sends into it (a host's sending side is read at
    the leaf port receiving it): packets, bytes, and for switch egress the queue, ECN and drop counters."""
    out = []
    for link in fab.topo.links:
        entry: dict[str, Any] = {"link": f"{link.a}:{link.b}", "kind": link.kind, "rate_bps": link.rate_bps}
        for direction, (src, src_port, dst, dst_port) in (
                ("a_to_b", (link.a, link.a_port, link.b, link.b_port)),
                ("b_to_a", (link.b, link.b_port, link.a, link.a_port))):
            if src in switches:
                port = switches[src]["ports"].get(str(src_port), {})
                entry[direction] = {k: port.get(k, 0) for k in (
                    "tx_pkts", "tx_bytes", "high_water_pkts", "queue_drop_pkts", "ecn_marks")}
            else:   # a host sends: what the leaf received
                port = switches.get(dst, {}).get("ports", {}).get(str(dst_port), {})
                entry[direction] = {"tx_pkts": port.get("rx_pkts", 0), "tx_bytes": port.get("rx_bytes", 0)}
        out.append(entry)
    return out


def _port_peers(fab: Fabric) -> dict[str, dict[int, str]]:
    peers: dict[str, dict[int, str]] = {}
    for link in fab.topo.links:
        peers.setdefault(link.b, {})[link.b_port] = link.a_ifname if link.a in fab.net.hosts else link.a
        if link.a in fab.net.switches:
            peers.setdefault(link.a, {})[link.a_port] = link.b
    return peers


def _switch_status(fab: Fabric, name: str, sw: Any, peers: dict[int, str]) -> dict[str, Any]:
    """One switch's counters; a stopped, dead (killed from outside) or silent switch is marked, not fatal:
    ``alive`` and ``state`` (running, stopped, dead, not answering) say which."""
    if sw.proc is None:
        return {"running": False, "alive": False, "state": "stopped", "ports": {}, "drop_reasons": {}}
    if not sw.alive():
        return {"running": False, "alive": False, "state": "dead", "exit_code": sw.proc.returncode, "ports": {},
                "drop_reasons": {}}
    try:
        return _live_switch_status(fab, name, sw, peers)
    except (OSError, ControlAddressError) as exc:   # its control socket refused or timed out
        return {"running": False, "alive": sw.alive(), "state": "not answering", "error": str(exc), "ports": {},
                "drop_reasons": {}}


def _live_switch_status(fab: Fabric, name: str, sw: Any, peers: dict[int, str]) -> dict[str, Any]:
    ports: dict[str, dict[str, Any]] = {}
    stats = parse_port_stats(sw.cli("port_stats")) if fab.backend == "embedded" else {}
    for port in fab.topo.ports_of(name):
        s = stats.get(port, {})
        rx = tx = (0, 0)
        if not s:
            rx = _counter(sw.cli(f"counter_read FabricIngress.port_rx {port}"))
            tx = _counter(sw.cli(f"counter_read FabricEgress.port_tx {port}"))
        ports[str(port)] = {
            "iface": fab.topo.ports_of(name)[port], "peer": peers.get(port, ""),
            "up": bool(s.get("up", 1)),
            "rx_pkts": s.get("rx_pkts", rx[0]), "rx_bytes": s.get("rx_bytes", rx[1]),
            "tx_pkts": s.get("tx_pkts", tx[0]), "tx_bytes": s.get("tx_bytes", tx[1]),
            "qdepth_pkts": s.get("qdepth_pkts", 0), "high_water_pkts": s.get("high_water_pkts", 0),
            "queue_drop_pkts": s.get("queue_drop_pkts", 0),    # TM tail drops at this egress port
            "rx_kernel_drops": s.get("rx_kernel_drops", 0),    # the port socket's receive ring overflowed
            "pipeline_drop_pkts": s.get("pipeline_drop_pkts", 0),   # the program dropped (parser, no route, ...)
            "ecn_marks": _counter(sw.cli(f"counter_read FabricEgress.ecn_marks {port}"))[0],
        }
    return {"running": True, "alive": True, "state": "running", "ports": ports, "drop_reasons": drop_reasons(sw)}


def drop_reasons(sw: Any) -> dict[str, int]:
    """One switch's program drops by cause (no_route, ttl, parser, acl): fabric.p4's ``drop_reasons`` counter."""
    return {reason: _counter(sw.cli(f"counter_read FabricIngress.drop_reasons {i}"))[0]
            for i, reason in DROP_REASONS.items()}


def host_drops(fab: Fabric) -> dict[str, dict[str, Any]]:
    """Per fabric host: its NICs' kernel receive/transmit drops (``/proc/net/dev``) and the UDP socket buffer
    overflows of its namespace (``/proc/net/snmp`` RcvbufErrors: the probes use UDP sockets), 0 if unreadable."""
    out: dict[str, dict[str, Any]] = {}
    nics: dict[str, list[str]] = {}
    for nic in fab.topo.nics:
        nics.setdefault(nic.server, []).append(nic.ifname)
    for name, host in fab.net.hosts.items():
        dev, udp = _proc_net(host.pid)
        out[name] = {"udp_rcvbuf_errors": udp.get("RcvbufErrors", 0), "udp_in_errors": udp.get("InErrors", 0),
                     "nics": {ifname: dev.get(ifname, {"rx_dropped": 0, "tx_dropped": 0})
                              for ifname in nics.get(name, [])}}
    return out


def _proc_net(pid: int) -> tuple[dict[str, dict[str, int]], dict[str, int]]:
    """``/proc/<pid>/net/dev`` drops per interface and the ``Udp:`` row of ``/proc/<pid>/net/snmp``."""
    dev: dict[str, dict[str, int]] = {}
    udp: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]:
            ifname, _, fields = line.partition(":")
            f = fields.split()
            dev[ifname.strip()] = {"rx_dropped": int(f[3]), "tx_dropped": int(f[11])}
        rows = [ln.split() for ln in Path(f"/proc/{pid}/net/snmp").read_text().splitlines() if ln.startswith("Udp:")]
        if len(rows) >= 2:
            udp = {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:], strict=False)}
    except (OSError, ValueError, IndexError):
        pass    # a host whose shell is gone: no counters
    return dev, udp


def _counter(text: str) -> tuple[int, int]:
    m = _COUNTER_RE.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def parse_port_stats(text: str) -> dict[int, dict[str, int]]:
    lines = [ln.split() for ln in text.strip().splitlines()]
    if not lines:
        return {}
    header = lines[0]
    out = {}
    for words in lines[1:]:
        row = dict(zip(header, words, strict=False))
        out[int(row["port"])] = {k: int(v) for k, v in row.items() if k not in ("port", "iface")}
    return out


def parse_table(text: str) -> list[dict[str, Any]]:
    """Rows of a switch table whose first column is not unique (``pfc_stats``, ``queue_stats``: port x priority),
    numbers as int, words kept."""
    lines = [ln.split() for ln in text.strip().splitlines()]
    if not lines:
        return []
    return [{k: int(v) if v.lstrip("-").isdigit() else v for k, v in zip(lines[0], row, strict=False)}
            for row in lines[1:]]


def priority_status(fab: Fabric) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per switch: PFC counters per port x priority (``pfc_stats``) and TM queues per port x priority
    (``queue_stats``: depth, high-water mark, drops, pauses that held the queue)."""
    return {name: {"pfc": parse_table(sw.cli("pfc_stats")), "queues": parse_table(sw.cli("queue_stats"))}
            for name, sw in fab.net.switches.items() if sw.alive()}


def spec_dict(spec: TopologySpec) -> dict[str, Any]:
    return {"servers": spec.servers, "gpus_per_server": spec.gpus_per_server, "pods": spec.pods,
            "spines": spec.spines, "link_rate_bps": spec.link_rate_bps, "delay_ns": spec.delay_ns, "mtu": spec.mtu,
            "oversubscription": spec.oversubscription, "seed": spec.seed, "pfc_priority": spec.pfc_priority}
