"""The fabric's side of operations telemetry: a thread that polls every switch's per-port counters (tx bytes and
packets, drops, ECN marks, PFC pauses sent and received and the time received pauses held the port, queue depth
and its high-water mark) and state once per interval into the
run's store (``sw.units.telemetry``), on the box's network time base; and, where the fabric has a collector
host, the INT collector (``emu.int_collect``) that stores the sink leaves' sampled INT reports there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any

from emu.status import parse_port_stats
from emu.traffic import PROBE_READY_TIMEOUT_NS, read_line, stop_proc
from sw.units.telemetry import TelemetryStore

if TYPE_CHECKING:
    from emu.fabric import Fabric

DEFAULT_INTERVAL_WALL_S = 0.5
"""Wall seconds between polls (the poll itself costs one control request per switch and one per port)."""
TELEMETRY_FILE = "telemetry.sqlite"
_LINK_RE = re.compile(r"^\d+:\s+([^:@]+)[^<]*<([^>]*)>")


class OpsCollector:
    """Polls ``fab``'s switches into ``store`` every ``interval_wall_s`` until ``stop()``; ``polls`` counts them."""

    def __init__(self, fab: Fabric, store: TelemetryStore, interval_wall_s: float = DEFAULT_INTERVAL_WALL_S) -> None:
        self.fab = fab
        self.store = store
        self.interval_wall_s = interval_wall_s
        self.polls = 0
        self._stop = threading.Event()
        self._peers = _port_peers(fab)
        self._pids = fab.net.node_pids()
        self._thread = threading.Thread(target=self._loop, name="ops-collector", daemon=True)
        self.int_proc: subprocess.Popen | None = None
        self.int_summary: dict[str, Any] = {}
        """What the INT collector stored once stopped: ``reports``, ``hop_rows``, ``drops`` by reason."""

    def start(self) -> None:
        if self.fab.net.collector is not None:     # first: when it cannot start, no poller thread is left behind
            self.int_proc = start_int_collector(self.fab, self.store)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        proc, self.int_proc = self.int_proc, None
        if proc is not None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(b"quit\n")
                proc.stdin.flush()
                self.int_summary = json.loads(read_line(self.fab.clock, proc, "INT collector", None,
                                                        PROBE_READY_TIMEOUT_NS))
            except (OSError, ValueError, RuntimeError):
                pass              # it died or said nothing: its rows so far are in the store
            finally:
                stop_proc(proc)
                if proc in self.fab.helper_procs:
                    self.fab.helper_procs.remove(proc)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval_wall_s)   # a stop wakes it at once

    def poll(self) -> None:
        """One sample of every switch (a dead or stopped one is recorded by its state, without ports)."""
        ports: list[dict[str, Any]] = []
        states: dict[str, str] = {}
        for name, sw in self.fab.net.switches.items():
            if sw.proc is None:
                states[name] = "stopped"
                continue
            if not sw.alive():
                states[name] = "dead"
                continue
            try:
                ports += self._switch_ports(name, sw)
                states[name] = "running"
            except Exception as exc:   # its control socket refused, vanished or timed out: a state, not an end
                states[name] = f"not answering: {exc}"[:120]
        # stamped when the poll ends: a poll that read any switch after an event is in every window since it
        self.store.add_poll(self.fab.clock.box_ns(), ports, states)
        self.polls += 1

    def _switch_ports(self, name: str, sw: Any) -> list[dict[str, Any]]:
        stats = parse_port_stats(sw.cli("port_stats"))
        carrier = link_carrier(self._pids.get(name))
        ifnames = self.fab.topo.ports_of(name)
        out = []
        for port, s in stats.items():
            ecn = sw.cli(f"counter_read FabricEgress.ecn_marks {port}")
            marks = int(ecn.split("packets=")[1].split(",")[0]) if "packets=" in ecn else 0
            out.append({"switch": name, "port": port, "peer": self._peers.get(name, {}).get(port, ""),
                        "up": int(bool(s.get("up", 1)) and carrier.get(ifnames.get(port, ""), True)),
                        "tx_bytes": s.get("tx_bytes", 0),
                        "tx_pkts": s.get("tx_pkts", 0), "rx_bytes": s.get("rx_bytes", 0),
                        "drops": s.get("queue_drop_pkts", 0) + s.get("rx_kernel_drops", 0)
                        + s.get("pipeline_drop_pkts", 0),
                        "ecn_marks": marks, "pfc_pauses": s.get("pfc_pauses_sent", 0) + s.get("pfc_pauses_rx", 0),
                        "qdepth_pkts": s.get("qdepth_pkts", 0), "high_water_pkts": s.get("high_water_pkts", 0),
                        "pfc_pauses_rx": s.get("pfc_pauses_rx", 0), "pfc_paused_ns": s.get("pfc_paused_ns", 0)})
        return out


def start_int_collector(fab: Fabric, store: TelemetryStore) -> subprocess.Popen:
    """``emu.int_collect`` on the fabric's collector host, storing into ``store``; tracked as a helper process."""
    nodes = ",".join(f"{sw.device_id}={sw.name}" for sw in fab.topo.switches)
    proc = fab.net.collector.popen(
        [sys.executable, "-m", "emu.int_collect", "--ifnames", ",".join(fab.net.collector_ifnames.values()),
         "--db", str(store.path), "--nodes", nodes, "--dilation", repr(fab.clock.dilation)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    fab.helper_procs.append(proc)
    read_line(fab.clock, proc, "INT collector", "ready", PROBE_READY_TIMEOUT_NS)
    return proc


def link_carrier(pid: int | None) -> dict[str, bool]:
    """Interface -> whether it is up with carrier (kernel flags UP and LOWER_UP) in the network namespace of
    process ``pid`` (a switch's): a link set down at either end shows here, while the switch's port socket
    stays open for when it comes back."""
    if pid is None:
        return {}
    try:
        text = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "-o", "link", "show"], capture_output=True,
                              text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = {}
    for line in text.splitlines():
        m = _LINK_RE.match(line)
        if m:
            flags = set(m.group(2).split(","))
            out[m.group(1)] = "UP" in flags and "LOWER_UP" in flags
    return out


def _port_peers(fab: Fabric) -> dict[str, dict[int, str]]:
    """switch -> port -> the node at the other end of its link (a server or a switch)."""
    peers: dict[str, dict[int, str]] = {}
    for link in fab.topo.links:
        peers.setdefault(link.a, {})[link.a_port] = link.b
        peers.setdefault(link.b, {})[link.b_port] = link.a
    return peers


def start_collector(fab: Fabric, interval_wall_s: float = DEFAULT_INTERVAL_WALL_S) -> OpsCollector:
    """A new store in the fabric's work directory (its topology and time base in ``meta``) and its poller."""
    store = TelemetryStore(fab.workdir / TELEMETRY_FILE, create=True)
    spec = fab.spec
    store.set_meta(topology={"servers": spec.servers, "gpus_per_server": spec.gpus_per_server,
                             "spines": spec.spines, "pods": spec.pods, "link_rate_bps": spec.link_rate_bps},
                   links=[{"a": lk.a, "b": lk.b, "a_port": lk.a_port, "b_port": lk.b_port, "kind": lk.kind,
                           "a_ifname": lk.a_ifname,
                           "rate_bps": lk.rate_bps} for lk in fab.topo.links],
                   time_dilation=fab.clock.dilation, origin_ns=fab.clock.box_ns(),
                   interval_wall_s=interval_wall_s, int_report_every=fab.int_cfg.reports_every)
    collector = OpsCollector(fab, store, interval_wall_s)
    collector.start()
    return collector
