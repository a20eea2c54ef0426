"""The ``Fabric`` context manager: bring a rail-optimized P4 fabric up, program it, read it, break it, tear it down.

``with Fabric(TopologySpec(servers=4, gpus_per_server=2)) as fab:`` builds the Mininet net (``emu.net``),
programs every switch with the commands ``emu.control`` derives (through each switch's control socket; the same
command text works for BMv2), shapes every switch port to its link's line rate, and on exit stops exactly what
it started.  ``status()`` reads per-port counters, queue high-water marks, ECN marks and drop reasons;
``faults`` (``emu.faults``) injects failures while it runs; ``probe()`` runs UDP reachability probes from hosts.
"""

from __future__ import annotations

import json
import re
import select
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu.control import EcnConfig, IntConfig, switch_commands
from emu.net import (
    FabricNet,
    Footprint,
    build_net,
    configure_collector,
    configure_hosts,
    configure_switch_ports,
    configure_wires,
    footprint,
    start_switches,
    stop_net,
)
from emu.topology import Topology, TopologySpec
from emu.wire import WireProfile
from sw.clock import Clock, get_clock

if TYPE_CHECKING:
    from emu.faults import FaultInjector

FABRIC_P4 = str(Path(__file__).resolve().parents[1] / "p4" / "programs" / "fabric.p4")
DROP_REASONS = {0: "no_route", 1: "ttl", 2: "parser", 3: "acl"}
PROBE_PORT = 4791
WORKDIR_PREFIX = "starpulse-fabric-"
PROBE_READY_TIMEOUT_NS = 20_000_000_000
_COUNTER_RE = re.compile(r"packets=(\d+), bytes=(\d+)")


class FabricError(RuntimeError):
    """The fabric cannot be brought up or operated as asked; the message says what failed and where."""

    is_user_error = True


@dataclass
class FabricTimings:
    """Wall seconds spent bringing the fabric up (build, host config, switch start, programming) and down."""

    build_s: float = 0.0
    configure_s: float = 0.0
    start_switches_s: float = 0.0
    program_s: float = 0.0
    up_s: float = 0.0
    down_s: float = 0.0


def collector_port(topo: Topology) -> int:
    """The leaves' port toward the INT collector: the first after the server and spine ports."""
    return topo.spec.servers_per_pod + topo.spec.spines + 1


def _wall_s(clock: Clock, start_ns: int) -> float:
    return clock.wall_duration_ns(clock.now_ns() - start_ns) / 1e9


class Fabric:
    """A running emulated fabric built from a ``TopologySpec``; use as a context manager (``up``/``down``)."""

    def __init__(self, spec: TopologySpec, *, backend: str = "embedded", ecn: EcnConfig | None = None,
                 int_cfg: IntConfig | None = None, program: str = FABRIC_P4, log_level: str = "warn",
                 workdir: str | None = None, fault_log: str | None = None, pcap_dir: str | None = None,
                 int_sink: str = "host", wired_links: list[str] | str | None = None,
                 clock: Clock | None = None) -> None:
        self.spec = spec
        self.topo = Topology(spec)
        self.wired = self._wired_keys("all" if spec.delay_ns else wired_links)
        self.backend = backend
        self.ecn = ecn or EcnConfig()
        self.int_cfg = int_cfg or IntConfig(sink_mode=int_sink, collector_port=(
            collector_port(self.topo) if int_sink == "report" else None))
        self.program = program
        self.log_level = log_level
        self.pcap_dir = pcap_dir
        self.clock = clock or get_clock()
        self._workdir_arg = workdir
        self.workdir: Path = Path(workdir) if workdir else Path(tempfile.gettempdir())   # set by up()
        self.fault_log = fault_log
        self.fnet: FabricNet | None = None
        self.timings = FabricTimings()
        self.faults: FaultInjector | None = None
        self.footprint: Footprint | None = None
        self._extra_procs: list[subprocess.Popen] = []

    def _wired_keys(self, links: list[str] | str | None) -> set[frozenset[str]]:
        """Links to build through a link emulator: 'all', a list of 'A:B' names, or none."""
        if not links:
            return set()
        if links == "all" or links == ["all"]:
            return {frozenset((lk.a, lk.b)) for lk in self.topo.links}
        names = links.split(",") if isinstance(links, str) else links
        keys = set()
        known = {frozenset((lk.a, lk.b)) for lk in self.topo.links}
        for name in names:
            key = frozenset(name.split(":"))
            if len(name.split(":")) != 2 or key not in known:
                raise FabricError(f"--impairable {name}: no such link (name links A:B, e.g. s0:p0l0 or p0l0:sp0)")
            keys.add(key)
        return keys

    # --- lifecycle -------------------------------------------------------------------------------------------
    def __enter__(self) -> Fabric:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """Build, configure, start and program the whole fabric; on any failure tear down what exists."""
        from emu.faults import FaultInjector

        if self.fnet is not None:
            raise FabricError("fabric is already up")
        clock = self.clock
        t0 = clock.now_ns()
        self.workdir = Path(self._workdir_arg or tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            t = clock.now_ns()
            report = self.int_cfg.enabled and self.int_cfg.sink_mode == "report"
            self.fnet = build_net(self.topo, program=self.program, backend=self.backend, workdir=self.workdir,
                                  log_level=self.log_level, pcap_dir=self.pcap_dir,
                                  collector_port=self.int_cfg.collector_port if report else None,
                                  wired=self.wired)
            self.timings.build_s = _wall_s(clock, t)
            t = clock.now_ns()
            configure_hosts(self.fnet)
            configure_switch_ports(self.fnet)
            configure_collector(self.fnet)
            configure_wires(self.fnet)
            for i, wire in enumerate(self.fnet.wires.values()):
                wire.start(WireProfile(delay_ns=self.spec.delay_ns), clock, seed=self.spec.seed + i)
            self.timings.configure_s = _wall_s(clock, t)
            t = clock.now_ns()
            start_switches(self.fnet)
            self.footprint = footprint(self.fnet)
            self.timings.start_switches_s = _wall_s(clock, t)
            t = clock.now_ns()
            self.program_all()
            self.timings.program_s = _wall_s(clock, t)
        except BaseException:
            self.down()
            raise
        self.faults = FaultInjector(self, log_path=self.fault_log or str(self.workdir / "faults.jsonl"))
        self.timings.up_s = _wall_s(clock, t0)

    def down(self) -> None:
        """Stop every process we started and remove every namespace and veth (idempotent)."""
        t0 = self.clock.now_ns()
        for proc in self._extra_procs:
            _stop_proc(proc)
        self._extra_procs.clear()
        if self.fnet is not None:
            stop_net(self.fnet)
            self.fnet = None
        if self._workdir_arg is None and self.workdir.name.startswith(WORKDIR_PREFIX):
            shutil.rmtree(self.workdir, ignore_errors=True)   # ours: switch logs, command files, batches
        self.timings.down_s = _wall_s(self.clock, t0)

    @property
    def net(self) -> FabricNet:
        if self.fnet is None:
            raise FabricError("fabric is not up")
        return self.fnet

    # --- control plane ---------------------------------------------------------------------------------------
    def port_rate_commands(self, switch: str, rates_bps: dict[int, int] | None = None) -> list[str]:
        """Shape every port of ``switch`` to its link rate (or ``rates_bps`` overrides) inside the switch's TM."""
        rates = dict(self.link_rates_bps(switch))
        rates.update(rates_bps or {})
        cmds = []
        for port, rate_bps in sorted(rates.items()):
            if self.backend == "embedded":
                cmds.append(f"set_port_rate {port} {rate_bps}")
            else:   # BMv2 shapes in packets/s: an MTU-sized packet per slot is the line rate for full frames
                cmds.append(f"set_queue_rate {max(1, rate_bps // (8 * self.spec.mtu))} {port}")
        return cmds

    def link_rates_bps(self, switch: str) -> dict[int, int]:
        out = {}
        for link in self.topo.links:
            if link.a == switch:
                out[link.a_port] = link.rate_bps
            if link.b == switch:
                out[link.b_port] = link.rate_bps
        return out

    def switch_program(self, switch: str) -> list[str]:
        """Every command that programs ``switch``: tables from ``emu.control`` plus port shaping."""
        return switch_commands(self.topo, switch, self.ecn, self.int_cfg) + self.port_rate_commands(switch)

    def program_switch(self, switch: str, commands: list[str] | None = None) -> None:
        """Send commands to one switch through its control socket; the first failing command is reported."""
        cmds = commands if commands is not None else self.switch_program(switch)
        sw = self.net.switches[switch]
        path = self.workdir / f"{switch}.commands.txt"
        path.write_text("\n".join(cmds) + "\n")
        try:
            sw.run_command_file(str(path))
        except Exception as exc:
            raise FabricError(f"programming switch {switch} with {path} failed: {exc}") from None

    def program_all(self) -> None:
        for sw in self.topo.switches:
            self.program_switch(sw.name)

    def switch_cli(self, switch: str, command: str) -> str:
        """One simple_switch_CLI command on a switch; returns its output."""
        if switch not in self.net.switches:
            raise FabricError(f"no switch named {switch!r} (switches: {', '.join(self.net.switches)})")
        return self.net.switches[switch].cli(command)

    # --- status ----------------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Per switch and port: rx/tx counters, queue depth and high-water mark, ECN marks, drops by cause."""
        out: dict[str, Any] = {"topology": spec_dict(self.spec), "backend": self.backend, "switches": {}}
        totals = {"rx_pkts": 0, "tx_pkts": 0, "ecn_marks": 0, "drops": 0, "queue_drop_pkts": 0}
        peers = self._port_peers()
        for name, sw in self.net.switches.items():
            entry = self._switch_status(name, sw, peers.get(name, {}))
            out["switches"][name] = entry
            for p in entry["ports"].values():
                totals["rx_pkts"] += p["rx_pkts"]
                totals["tx_pkts"] += p["tx_pkts"]
                totals["ecn_marks"] += p["ecn_marks"]
                totals["queue_drop_pkts"] += p["queue_drop_pkts"]
            totals["drops"] += sum(entry["drop_reasons"].values()) + sum(
                p["queue_drop_pkts"] for p in entry["ports"].values())
        out["totals"] = totals
        out["links"] = self._link_status(out["switches"])
        out["faults"] = self.faults.active() if self.faults else {}
        return out

    def _link_status(self, switches: dict[str, Any]) -> list[dict[str, Any]]:
        """Per link and direction, from the switch port that sends into it (a host's sending side is read at
        the leaf port receiving it): packets, bytes, and for switch egress the queue, ECN and drop counters."""
        out = []
        for link in self.topo.links:
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

    def _port_peers(self) -> dict[str, dict[int, str]]:
        peers: dict[str, dict[int, str]] = {}
        for link in self.topo.links:
            peers.setdefault(link.b, {})[link.b_port] = link.a_ifname if link.a in self.net.hosts else link.a
            if link.a in self.net.switches:
                peers.setdefault(link.a, {})[link.a_port] = link.b
        return peers

    def _switch_status(self, name: str, sw: Any, peers: dict[int, str]) -> dict[str, Any]:
        if sw.proc is None:
            return {"running": False, "ports": {}, "drop_reasons": {}}
        ports: dict[str, dict[str, Any]] = {}
        stats = _parse_port_stats(sw.cli("port_stats")) if self.backend == "embedded" else {}
        for port in self.topo.ports_of(name):
            s = stats.get(port, {})
            rx = tx = (0, 0)
            if not s:
                rx = _counter(sw.cli(f"counter_read FabricIngress.port_rx {port}"))
                tx = _counter(sw.cli(f"counter_read FabricEgress.port_tx {port}"))
            ports[str(port)] = {
                "iface": self.topo.ports_of(name)[port], "peer": peers.get(port, ""),
                "up": bool(s.get("up", 1)),
                "rx_pkts": s.get("rx_pkts", rx[0]), "rx_bytes": s.get("rx_bytes", rx[1]),
                "tx_pkts": s.get("tx_pkts", tx[0]), "tx_bytes": s.get("tx_bytes", tx[1]),
                "qdepth_pkts": s.get("qdepth_pkts", 0), "high_water_pkts": s.get("high_water_pkts", 0),
                "queue_drop_pkts": s.get("queue_drop_pkts", 0),
                "ecn_marks": _counter(sw.cli(f"counter_read FabricEgress.ecn_marks {port}"))[0],
            }
        drops = {reason: _counter(sw.cli(f"counter_read FabricIngress.drop_reasons {i}"))[0]
                 for i, reason in DROP_REASONS.items()}
        return {"running": True, "ports": ports, "drop_reasons": drops}

    # --- traffic ----------------------------------------------------------------------------------------------
    def probe(self, pairs: list[tuple[str, str]], *, timeout_ms: int = 400, retries: int = 4,
              port: int = PROBE_PORT) -> list[dict[str, Any]]:
        """UDP probes between NIC addresses (``emu.probe`` in every involved host); one result per pair."""
        with ProbeSession(self, pairs, port=port) as session:
            return session.run(pairs, timeout_ms=timeout_ms, retries=retries)

    def send_flows(self, src_ip: str, dst_ip: str, count: int, *, port: int = PROBE_PORT,
                   seed: int | None = None) -> int:
        """``count`` one-packet UDP flows src -> dst from distinct random source ports (the ECMP entropy)."""
        nic = next((n for n in self.topo.nics if n.ip == src_ip), None)
        if nic is None:
            raise FabricError(f"{src_ip} is not a NIC address of this fabric")
        out = self.net.hosts[nic.server].cmd(
            f"{sys.executable} -m emu.probe --flows {count} --src {src_ip} --dst {dst_ip} --port {port}"
            f" --seed {self.spec.seed if seed is None else seed} 2>&1")
        try:
            return int(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise FabricError(f"sending flows from {nic.server}: {out.strip()[-500:]}") from None

    def send_through(self, src_ip: str, dst_ip: str, *, packets: int, pps: float, payload_bytes: int,
                     idle_pairs: list[tuple[str, str]] | None = None, port: int = PROBE_PORT
                     ) -> tuple[list[list[int]], list[dict[str, Any]]]:
        """Paced ECN-capable UDP src -> dst, received by a sink that records ECN and the last hop's INT per
        packet; ``idle_pairs`` are probed meanwhile.  Returns (sink rows, idle probe results)."""
        nics = {n.ip: n for n in self.topo.nics}
        if src_ip not in nics or dst_ip not in nics:
            raise FabricError(f"{src_ip} -> {dst_ip}: not NIC addresses of this fabric")
        py = [sys.executable, "-m", "emu.probe", "--port", str(port)]
        sink = self.net.hosts[nics[dst_ip].server].popen(
            [*py, "--sink", dst_ip, "--idle-ms", "1500"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started = [sink]
        self._extra_procs.append(sink)   # down() stops them too, should this be interrupted
        idle: list[dict[str, Any]] = []
        session = ProbeSession(self, idle_pairs, port=port) if idle_pairs else None
        try:
            self._read_line(sink, nics[dst_ip].server, "ready", PROBE_READY_TIMEOUT_NS)
            blast = self.net.hosts[nics[src_ip].server].popen(
                [*py, "--blast", str(packets), "--pps", f"{pps:.3f}", "--size", str(payload_bytes), "--ecn",
                 "--src", src_ip, "--dst", dst_ip], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            started.append(blast)
            self._extra_procs.append(blast)
            while session is not None and blast.poll() is None:   # idle paths, while the port is congested
                idle += session.run(idle_pairs, retries=1)
            budget_ns = int(packets / pps * 1e9) * 4 + PROBE_READY_TIMEOUT_NS
            self._read_line(blast, nics[src_ip].server, None, budget_ns)
            rows = json.loads(self._read_line(sink, nics[dst_ip].server, None, budget_ns))
        finally:
            if session is not None:
                session.close()
            for proc in started:
                _stop_proc(proc)
                self._extra_procs.remove(proc)
        return rows, idle

    def int_collector(self) -> ReportCollector:
        """Capture INT reports at the collector (report mode): ``with fab.int_collector() as c: ...; c.reports``."""
        if self.net.collector is None:
            raise FabricError("no INT collector: bring the fabric up with int_sink='report' (--int-sink report)")
        return ReportCollector(self)

    def port_counters(self, switch: str) -> dict[int, dict[str, int]]:
        """``port_stats`` of one switch (embedded backend): rx/tx/drops/queue per port number."""
        return _parse_port_stats(self.switch_cli(switch, "port_stats"))

    def _read_line(self, proc: subprocess.Popen, server: str, expect: str | None, timeout_ns: int) -> str:
        assert proc.stdout is not None
        deadline = self.clock.now_ns() + timeout_ns
        while True:
            remaining = deadline - self.clock.now_ns()
            if remaining <= 0:
                raise FabricError(f"probe on {server}: no answer within {timeout_ns / 1e9:.1f} s")
            ready, _, _ = select.select([proc.stdout], [], [], self.clock.wall_duration_ns(remaining) / 1e9)
            if not ready:
                continue
            line = proc.stdout.readline().decode(errors="replace").strip()
            if not line:
                err = proc.stderr.read().decode(errors="replace")[-1000:] if proc.stderr else ""
                raise FabricError(f"probe on {server} exited: {err.strip() or 'no output'}")
            if expect is None or line == expect:
                return line


class ReportCollector:
    """``emu.probe --collect`` on the collector host while the ``with`` block runs; ``reports`` afterwards."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        self.reports: list[dict[str, Any]] = []
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ReportCollector:
        col = self.fab.net.collector
        assert col is not None
        ifnames = ",".join(self.fab.net.collector_ifnames.values())
        self.proc = col.popen([sys.executable, "-m", "emu.probe", "--collect", ifnames],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.fab._extra_procs.append(self.proc)
        self.fab._read_line(self.proc, "collector", "ready", PROBE_READY_TIMEOUT_NS)
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.write(b"quit\n")
            proc.stdin.flush()
            self.reports = json.loads(self.fab._read_line(proc, "collector", None, PROBE_READY_TIMEOUT_NS))
        finally:
            _stop_proc(proc)
            self.fab._extra_procs.remove(proc)
            self.proc = None


class ProbeSession:
    """``emu.probe`` processes in the hosts of some NIC pairs, started once and reused for several rounds."""

    def __init__(self, fab: Fabric, pairs: list[tuple[str, str]], *, port: int = PROBE_PORT) -> None:
        self.fab = fab
        self.by_ip = {n.ip: n for n in fab.topo.nics}
        for src, dst in pairs:
            for ip in (src, dst):
                if ip not in self.by_ip:
                    raise FabricError(f"{ip} is not a NIC address of this fabric")
        involved = {ip for pair in pairs for ip in pair}
        self.servers = sorted({self.by_ip[ip].server for ip in involved}, key=lambda s: int(s[1:]))
        self.procs: dict[str, subprocess.Popen] = {}
        try:
            for server in self.servers:
                addrs = ",".join(n.ip for n in fab.topo.nics_of(server) if n.ip in involved)
                self.procs[server] = fab.net.hosts[server].popen(
                    [sys.executable, "-m", "emu.probe", "--addrs", addrs, "--port", str(port)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for server, proc in self.procs.items():
                fab._read_line(proc, server, "ready", PROBE_READY_TIMEOUT_NS)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ProbeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, pairs: list[tuple[str, str]], *, timeout_ms: int = 400, retries: int = 4) -> list[dict[str, Any]]:
        """One round: every pair probed by its source's host, all hosts at once; one result per pair."""
        work: dict[str, list[tuple[str, str]]] = {s: [] for s in self.servers}
        for src, dst in pairs:
            work[self.by_ip[src].server].append((src, dst))
        for server, proc in self.procs.items():
            assert proc.stdin is not None
            req = {"pairs": work[server], "timeout_ms": timeout_ms, "retries": retries}
            proc.stdin.write((json.dumps(req) + "\n").encode())
            proc.stdin.flush()
        budget_ns = (len(pairs) // max(1, len(self.servers)) * 2_000_000
                     + (retries + 2) * timeout_ms * 1_000_000 + PROBE_READY_TIMEOUT_NS)
        results: dict[tuple[str, str], dict[str, Any]] = {}
        for server, proc in self.procs.items():
            line = self.fab._read_line(proc, server, None, budget_ns)
            for r in json.loads(line)["results"]:
                results[(r["src"], r["dst"])] = r
        return [results[p] for p in pairs]

    def close(self) -> None:
        for proc in self.procs.values():
            _stop_proc(proc)
        self.procs.clear()


def _stop_proc(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            if proc.stdin:
                proc.stdin.write(b"quit\n")
                proc.stdin.flush()
        except OSError:
            pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=3)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def _counter(text: str) -> tuple[int, int]:
    m = _COUNTER_RE.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _parse_port_stats(text: str) -> dict[int, dict[str, int]]:
    lines = [ln.split() for ln in text.strip().splitlines()]
    if not lines:
        return {}
    header = lines[0]
    out = {}
    for words in lines[1:]:
        row = dict(zip(header, words, strict=False))
        out[int(row["port"])] = {k: int(v) for k, v in row.items() if k not in ("port", "iface")}
    return out


def spec_dict(spec: TopologySpec) -> dict[str, Any]:
    return {"servers": spec.servers, "gpus_per_server": spec.gpus_per_server, "pods": spec.pods,
            "spines": spec.spines, "link_rate_bps": spec.link_rate_bps, "delay_ns": spec.delay_ns, "mtu": spec.mtu,
            "oversubscription": spec.oversubscription, "seed": spec.seed}
