"""The fabric's side of operations telemetry: a thread that polls every switch's per-port counters (tx bytes and
packets, drops, ECN marks, PFC pauses sent and received and the time received pauses held the port, queue depth
and its high-water mark) and state once per interval into the
run's store (``sw.units.telemetry``), on the box's network time base; and, where the fabric has a collector
host, the INT collector (``emu.int_collect``) that stores the sink leaves' sampled INT reports there."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from emu.link_flags import NetnsLinks
from emu.status import parse_port_stats
from emu.traffic import PROBE_READY_TIMEOUT_NS, read_line, stop_proc
from p4.errors import CommandError
from p4.switch.control import ControlAddressError, ControlClient
from sw.units.telemetry import TelemetryStore

if TYPE_CHECKING:
    from emu.fabric import Fabric

DEFAULT_INTERVAL_WALL_S = 0.5
"""Wall seconds between polls (a poll costs each switch one wake-up of its loop: port stats and its ports' ECN marks
pipelined over one kept connection; and one rtnetlink dump of its namespace's links)."""
TELEMETRY_FILE = "telemetry.sqlite"
ECN_READ = "counter_read FabricEgress.ecn_marks"


class OpsCollector:
    """Polls ``fab``'s switches into ``store`` every ``interval_wall_s`` until ``stop()``; ``polls`` counts them,
    ``cpu_ns`` the CPU its thread spent polling (what ``ops cost`` reports)."""

    def __init__(self, fab: Fabric, store: TelemetryStore, interval_wall_s: float = DEFAULT_INTERVAL_WALL_S) -> None:
        self.fab = fab
        self.store = store
        self.interval_wall_s = interval_wall_s
        self.polls = 0
        self.cpu_ns = 0
        self._stop = threading.Event()
        self._peers = _port_peers(fab)
        self._pids = fab.net.node_pids()
        self._clients: dict[str, ControlClient] = {}   # embedded switches: one kept control connection each
        self._links: dict[str, NetnsLinks] = {}        # per switch: an rtnetlink socket in its namespace
        self._ports: dict[str, list[int]] = {}         # per switch: its ports at the last poll
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
        for name in list(self._clients):
            self._drop_client(name)
        for links in self._links.values():
            links.close()
        self._links.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            t0 = time.thread_time_ns()               # CPU time of this thread, not a clock of the data path
            self.poll()
            self.cpu_ns += time.thread_time_ns() - t0
            self._stop.wait(self.interval_wall_s)   # a stop wakes it at once

    def poll(self) -> None:
        """One sample of every switch (a dead or stopped one is recorded by its state, without ports)."""
        ports: list[dict[str, Any]] = []
        states: dict[str, str] = {}
        for name, sw in self.fab.net.switches.items():
            if sw.proc is None:
                states[name] = "stopped"
                self._drop_client(name)
                continue
            if not sw.alive():
                states[name] = "dead"
                self._drop_client(name)
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
        stats, marks = self._read_switch(name, sw)
        carrier = self._carrier(name)
        ifnames = self.fab.topo.ports_of(name)
        out = []
        for port, s in stats.items():
            out.append({"switch": name, "port": port, "peer": self._peers.get(name, {}).get(port, ""),
                        "up": int(bool(s.get("up", 1)) and carrier.get(ifnames.get(port, ""), True)),
                        "tx_bytes": s.get("tx_bytes", 0),
                        "tx_pkts": s.get("tx_pkts", 0), "rx_bytes": s.get("rx_bytes", 0),
                        "drops": s.get("queue_drop_pkts", 0) + s.get("rx_kernel_drops", 0)
                        + s.get("pipeline_drop_pkts", 0),
                        "ecn_marks": marks.get(port, 0),
                        "pfc_pauses": s.get("pfc_pauses_sent", 0) + s.get("pfc_pauses_rx", 0),
                        "qdepth_pkts": s.get("qdepth_pkts", 0), "high_water_pkts": s.get("high_water_pkts", 0),
                        "pfc_pauses_rx": s.get("pfc_pauses_rx", 0), "pfc_paused_ns": s.get("pfc_paused_ns", 0)})
        return out

    def _read_switch(self, name: str, sw: Any) -> tuple[dict[int, dict[str, Any]], dict[int, int]]:
        """A switch's port counters and its ECN marks per port.  The embedded switch over one kept connection, in
        one wake-up of its loop (port stats and the mark counter of every port it had at the last poll, pipelined;
        a port new since then costs a second), retried once on a fresh connection (a restarted switch); BMv2 one
        CLI run per command."""
        if getattr(sw, "backend", "embedded") != "embedded":
            stats = parse_port_stats(sw.cli("port_stats"))
            return stats, {port: _marks(sw.cli(f"{ECN_READ} {port}")) for port in stats}
        for attempt in (0, 1):
            client = self._clients.get(name)
            try:
                if client is None:
                    client = self._clients[name] = ControlClient(sw.ctl)
                known = self._ports.get(name, [])
                replies = client.pipeline([{"port_stats": True}, *({"cmd": f"{ECN_READ} {p}"} for p in known)])
                if not replies[0].get("ok"):
                    raise CommandError(replies[0].get("error", "port_stats failed"))
                stats = {int(k): v for k, v in replies[0]["ports"].items()}
                marks = dict(zip(known, replies[1:], strict=True))
                new = [p for p in stats if p not in marks]
                if new:
                    marks.update(zip(new, client.pipeline([{"cmd": f"{ECN_READ} {p}"} for p in new]), strict=True))
                self._ports[name] = list(stats)
                return stats, {p: _marks(str(marks[p].get("out", ""))) if marks[p].get("ok") else 0 for p in stats}
            except (ControlAddressError, CommandError):
                self._drop_client(name)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def _carrier(self, name: str) -> dict[str, bool]:
        """The switch namespace's links (``link_carrier``) over a kept rtnetlink socket; {} when unreadable."""
        links = self._links.get(name)
        try:
            if links is None:
                pid = self._pids.get(name)
                if pid is None:
                    return {}
                links = self._links[name] = NetnsLinks(pid)
            return links.carrier()
        except OSError:
            if links is not None:
                links.close()
                self._links.pop(name, None)
            return {}

    def _drop_client(self, name: str) -> None:
        client = self._clients.pop(name, None)
        if client is not None:
            client.close()


def _marks(out: str) -> int:
    """Packets of a ``counter_read`` output (0 when it has none)."""
    return int(out.split("packets=")[1].split(",")[0]) if "packets=" in out else 0


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
    stays open for when it comes back.  {} when the namespace cannot be read."""
    if pid is None:
        return {}
    try:
        links = NetnsLinks(pid)
    except OSError:
        return {}
    try:
        return links.carrier()
    except OSError:
        return {}
    finally:
        links.close()


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
