"""The ``Fabric`` context manager: bring a rail-optimized P4 fabric up, program it, read it, break it, tear it down.

``with Fabric(TopologySpec(servers=4, gpus_per_server=2)) as fab:`` builds the Mininet net (``emu.net``),
programs every switch with the commands ``emu.control_plane`` derives (through each switch's control socket; the same
command text works for BMv2), shapes every switch port to its link's line rate, and on exit stops exactly what
it started.  ``status()`` reads per-port counters, queue high-water marks, ECN marks and drop reasons;
``faults`` (``emu.faults``) injects failures while it runs; ``probe()`` runs UDP reachability probes from hosts.
Scripts give ``fabric up``'s flags as keyword options instead (``Fabric(servers=2, link_rate="1G")``, checked by
the CLI's parser) and drive it with ``run``, ``fault``, ``launch`` and ``cli``; ``help(Fabric)`` has the details.
"""

from __future__ import annotations

import _thread
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu import fabric_daemon, traffic
from emu.control_plane import EcnConfig, IntConfig, dscp_priority_map, qos_commands, switch_commands
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
    tracked_processes,
)
from emu.reap import owned_tempdir, record
from emu.status import fabric_status, parse_port_stats, parse_table
from emu.traffic import PROBE_PORT
from emu.wire import WireProfile
from p4.switch.switch_lag import parse_lag_json
from sw.clock import Clock, get_clock
from sw.clock.lag import ENV_LAG_DIR, ENV_LINK_MTU, LagStats, fidelity, read_lag_dir, write_lag_file
from sw.collectives.fabric_topology import Topology, TopologySpec

if TYPE_CHECKING:
    from emu.faults import FaultInjector

FABRIC_P4 = str(Path(__file__).resolve().parents[1] / "p4" / "programs" / "fabric.p4")
WORKDIR_PREFIX = "starpulse-fabric-"
PFC_COUNTERS = ("pfc_pauses_sent", "pfc_pauses_rx", "pfc_paused_ns", "pfc_xoff_events", "pfc_headroom_drop_pkts",
                "pfc_watchdog_trips")


@dataclass(frozen=True)
class PfcSettings:
    """Priority flow control on every switch port (``--pfc on`` and its thresholds)."""

    enabled: bool = False
    xoff_bytes: int = 48_000
    xon_bytes: int = 24_000
    headroom_bytes: int = 32_000
    watchdog_ms: float = 0.0

    def commands(self, ports: list[int], priority: int | None = None) -> list[str]:
        """Switch commands enabling PFC on ``ports``, with egress queues deep enough that PFC, not tail drop,
        bounds the buffer (every ingress port may hold XOFF + headroom bytes of minimum-size frames).  With a
        ``priority`` (the topology's ``pfc_priority``) RoCE is classified by DSCP (``emu.control_plane.qos_commands``)
        and only that priority is lossless; without one every priority is, and nothing maps DSCPs."""
        if not self.enabled:
            return []
        per_port_pkts = (self.xoff_bytes + self.headroom_bytes) // 64 + 1
        cmds = [f"set_queue_depth {max(64, per_port_pkts * len(ports))}"]
        if priority is not None:
            cmds += qos_commands(priority)
        for port in ports:
            cmds += [f"pfc_enable {port} 1" + ("" if priority is None else f" {priority}"),
                     f"pfc_thresholds {port} {self.xoff_bytes} {self.xon_bytes} {self.headroom_bytes}"]
            if self.watchdog_ms:
                cmds.append(f"pfc_watchdog {port} {self.watchdog_ms:g}")
        return cmds


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
    """The rail-optimized fabric of ``starpulse fabric up`` as a Python object; the entry point of scripts and tests.

    Give the topology as ``fabric up``'s flags in keyword form (``link_rate="1G"`` is ``--link-rate 1G``;
    ``pfc=True`` or ``"on"`` is ``--pfc on``; ``impairable="s0:p0l0"``, ``pcap_dir``, ``log_level``,
    ``int_sink``, ``backend``, ``time_dilation``: given, else $STARPULSE_TIME_DILATION, else calibrated by
    ``up()`` as ``fabric up`` does): they are parsed and checked by the CLI's own parser, so a bad value raises
    ``FabricCliError`` with the line the CLI prints (``--servers 0: must be within 1..250``).  Or give a
    ``TopologySpec`` (then ``pfc`` is a ``PfcSettings``).  ``name="x"`` publishes the running fabric as
    ``fabric up --name x`` does (state file and control socket: ``starpulse fabric status|fault|down --name x``
    and ``starpulse run|bench --name x`` reach it; ``fabric down`` interrupts the script with KeyboardInterrupt).

        with Fabric(servers=2, gpus_per_server=2, spines=1, link_rate="100M") as fab:
            print(fab.run("s0", "ping -c1 s1:1"))        # a command in a node's namespace
            fab.fault("link_down", "p0l0:sp0")          # emu.faults; logged to fab.faults.log_path
            fab.launch(["python", "train.py"])          # every GPU rank, as `starpulse run` does
            fab.cli()                                   # the fabric-aware Mininet CLI until exit

    ``up()``/``down()`` do what the ``with`` block does; ``down`` removes every process, namespace, interface
    and temporary file the fabric made, also when the block ends by an exception or Ctrl-C.  Read it with
    ``status()``, ``port_counters()``, ``probe()``, ``int_collector()``, ``switch_cli()``, ``fidelity()``.
    """

    def __init__(self, spec: TopologySpec | None = None, *, backend: str = "embedded",
                 ecn: EcnConfig | None = None, int_cfg: IntConfig | None = None, program: str = FABRIC_P4,
                 log_level: str = "warn", workdir: str | None = None, fault_log: str | None = None,
                 pcap_dir: str | None = None, int_sink: str = "host", wired_links: list[str] | str | None = None,
                 clock: Clock | None = None, pfc: PfcSettings | bool | str | None = None, name: str | None = None,
                 control: str = "cli", ops: bool = False, **options: Any) -> None:
        from emu import cli

        self._pcap_flag: str | None = None
        self._dilation: tuple[Any, Any] | None = None
        if spec is None:    # keyword flags: the CLI's parser and checks, so errors read as the CLI's
            args = cli.parse_up_options({"backend": backend, "int_sink": int_sink, "log_level": log_level,
                                         "impairable": wired_links, "pfc": pfc, "control": control, **options})
            opts = cli.fabric_options(args)
            spec, pfc, wired_links, log_level = opts["spec"], opts["pfc"], args.impairable, args.log_level
            control = opts["control"]
            self._pcap_flag, pcap_dir = pcap_dir or args.pcap, None   # created (like --pcap) by up()
            if clock is None:   # --time-dilation (else $STARPULSE_TIME_DILATION, else auto), applied by up()
                self._dilation = (args.time_dilation, lambda c: Fabric(**opts, clock=c))
        elif options or isinstance(pfc, bool | str):
            raise FabricError(f"Fabric(spec, ...): topology options {sorted(options) or ['pfc']} need spec=None "
                              "(give either a TopologySpec or fabric up's flags)")
        self.name = name
        if name is not None:
            fabric_daemon.state_dir(name)    # the --name check: letters, digits, '-', '_', at most 48 characters
        self.lock = threading.RLock()    # node shells: run(), fault(), cli() and the control socket's faults
        self._serving: dict[str, Any] = {"flag": False}
        self.spec = spec
        self.pfc = pfc or PfcSettings(enabled=spec.pfc_priority is not None)
        if self.pfc.enabled and backend != "embedded":
            raise FabricError("--pfc on: needs --backend embedded (BMv2 has no PFC)")
        if spec.pfc_priority is not None and not self.pfc.enabled:
            raise FabricError(f"--pfc-priority {spec.pfc_priority}: needs --pfc on")
        self.topo = Topology(spec)
        self.wired = self._wired_keys("all" if spec.delay_ns else wired_links)
        self.backend = backend
        if control not in ("cli", "p4runtime") or (control == "p4runtime" and backend != "embedded"):
            raise FabricError(f"--control {control}: allowed cli or p4runtime (p4runtime needs --backend embedded)")
        self.control = control
        self.ecn = ecn or EcnConfig()
        # a collector host in report mode, and with ops on (sampled reports: emu.int_collect stores them)
        self.int_cfg = int_cfg or IntConfig(sink_mode=int_sink, collector_port=(
            collector_port(self.topo) if int_sink == "report" or ops else None))
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
        self.helper_procs: list[subprocess.Popen] = []
        self.owned: dict[str, Any] = {}   # more for the workdir's owned.json (e.g. the CLI's state directory)
        self.lag_dir: Path | None = None
        self._env_link_mtu: tuple[str | None] | None = None   # $STARPULSE_LINK_MTU before up() set it, boxed
        self.ops = ops
        """Operations telemetry on: a poller records the switches into the run's store (``emu.ops_collect``)."""
        self.collector: Any = None

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
        from emu import cli
        from emu.faults import FaultInjector

        if self.fnet is not None:
            raise FabricError("fabric is already up")
        state_dir = None if self.name is None else fabric_daemon.claim_state_dir(self.name)   # one per name
        if self._pcap_flag:
            self.pcap_dir = str(cli.output_dir("--pcap", self._pcap_flag))
        if self._dilation is not None:   # as fabric up: the dilation given, or calibrated (emu.calibrate)
            from emu.calibrate import resolve_dilation

            flag, make = self._dilation
            self.clock = cli.apply_dilation(resolve_dilation(flag), make)
        if state_dir is not None:        # as `fabric up --name`: faults logged beside the state file
            state_dir.mkdir(parents=True, exist_ok=True)
            self.owned["state_dir"] = str(state_dir)   # killed before its state is written: the next run reaps it
            self.fault_log = self.fault_log or str(state_dir / "faults.jsonl")
        clock = self.clock
        t0 = clock.now_ns()
        self.workdir = Path(self._workdir_arg or owned_tempdir(WORKDIR_PREFIX))   # owned: see emu.reap
        self.workdir.mkdir(parents=True, exist_ok=True)
        record(self.workdir, **self.owned)
        # lag accounting: link emulators and ranks started from here report into the fabric's lag directory
        self.lag_dir = self.workdir / "lag"
        self.lag_dir.mkdir(exist_ok=True)
        os.environ[ENV_LAG_DIR] = str(self.lag_dir)
        # ...and judge lateness against one frame of this fabric's MTU (sw.clock.lag.mtu_serialization_ns)
        self._env_link_mtu = (os.environ.get(ENV_LINK_MTU),)
        os.environ[ENV_LINK_MTU] = str(self.spec.mtu)
        try:
            t = clock.now_ns()
            report = self.int_cfg.enabled and self.int_cfg.collector_port is not None
            self.fnet = build_net(self.topo, program=self.program, backend=self.backend, workdir=self.workdir,
                                  log_level=self.log_level, pcap_dir=self.pcap_dir, control=self.control,
                                  collector_port=self.int_cfg.collector_port if report else None,
                                  wired=self.wired)
            self.timings.build_s = _wall_s(clock, t)
            record(self.workdir, processes=tracked_processes(self.fnet))   # node shells: their namespaces
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
            record(self.workdir, processes=tracked_processes(self.fnet))
            self.footprint = footprint(self.fnet)
            self.timings.start_switches_s = _wall_s(clock, t)
            t = clock.now_ns()
            self.program_all()
            self.timings.program_s = _wall_s(clock, t)
        except BaseException:
            self.down()
            raise
        self.faults = FaultInjector(self, log_path=self.fault_log or str(self.workdir / "faults.jsonl"))
        if self.ops:
            from emu.ops_collect import start_collector

            try:
                self.collector = start_collector(self)
            except BaseException:
                self.down()
                raise
        self.timings.up_s = _wall_s(clock, t0)
        if state_dir is not None:
            try:
                self._publish(state_dir)
            except BaseException:
                self.down()
                raise

    def _publish(self, state_dir: Path) -> None:
        """State file and control socket as ``fabric up`` has them, served by a thread until ``down``."""
        server = fabric_daemon.open_control(state_dir, self)
        serving = self._serving = {"flag": False, "server": server, "state_dir": state_dir}

        def serve() -> None:
            fabric_daemon.serve(server, self, serving, self.lock)
            if not serving.get("closing"):   # `fabric down --name` from elsewhere: end the script's block
                _thread.interrupt_main()

        self._serving["thread"] = threading.Thread(target=serve, name=f"fabric-{self.name}-ctl", daemon=True)
        self._serving["thread"].start()

    def _republish(self) -> None:
        """Rewrite the state file (a fault may have restarted a switch: its new process is recorded)."""
        if self._serving.get("server") is not None:
            d = self._serving["state_dir"]
            fabric_daemon.write_state(d, self, d / "fabric.sock")

    @property
    def stop_requested(self) -> bool:
        """True once ``starpulse fabric down --name NAME`` asked this (published) fabric to stop."""
        return bool(self._serving["flag"]) and not self._serving.get("closing")

    def down(self) -> None:
        """Stop every process we started and remove every namespace and veth (idempotent)."""
        t0 = self.clock.now_ns()
        serving, self._serving = self._serving, {"flag": False}
        if serving.get("server") is not None:   # published: stop answering before the nodes go
            serving["closing"] = serving["flag"] = True
            if serving["thread"] is not threading.current_thread():
                serving["thread"].join(timeout=30)
            serving["server"].close()
        if self.collector is not None:
            self.collector.stop()
            self.collector.store.close()
            self.collector = None
        if self.faults is not None:
            self.faults.stop_flaps()     # before the nodes go: a flap thread never touches a torn-down link
        for proc in self.helper_procs:
            traffic.stop_proc(proc)
        self.helper_procs.clear()
        if self.fnet is not None:
            stop_net(self.fnet)
            self.fnet = None
        if self.lag_dir is not None and os.environ.get(ENV_LAG_DIR) == str(self.lag_dir):
            del os.environ[ENV_LAG_DIR]
        if self._env_link_mtu is not None:         # put back what was there before up()
            (before,), self._env_link_mtu = self._env_link_mtu, None
            if before is None:
                os.environ.pop(ENV_LINK_MTU, None)
            else:
                os.environ[ENV_LINK_MTU] = before
        if self._workdir_arg is None and self.workdir.name.startswith(WORKDIR_PREFIX):
            shutil.rmtree(self.workdir, ignore_errors=True)   # ours: switch logs, command files, batches
        if self.name is not None and self.owned.get("state_dir"):
            fabric_daemon.remove_state(self.name)
            self.owned.pop("state_dir")
        self.timings.down_s = _wall_s(self.clock, t0)

    @property
    def net(self) -> FabricNet:
        """The Mininet nodes of the running fabric (``hosts``, ``switches``, ``net``: Mininet's own object)."""
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
        """Line rate of each port of ``switch`` (its link's rate), by port number."""
        out = {}
        for link in self.topo.links:
            if link.a == switch:
                out[link.a_port] = link.rate_bps
            if link.b == switch:
                out[link.b_port] = link.rate_bps
        return out

    def switch_program(self, switch: str) -> list[str]:
        """Every command that programs ``switch``: tables from ``emu.control_plane`` plus port shaping."""
        return (switch_commands(self.topo, switch, self.ecn, self.int_cfg) + self.port_rate_commands(switch)
                + self.pfc.commands(sorted(self.topo.ports_of(switch)), self.spec.pfc_priority))

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
        """Program every switch with its ``switch_program``."""
        for sw in self.topo.switches:
            self.program_switch(sw.name)

    def switch_cli(self, switch: str, command: str) -> str:
        """One simple_switch_CLI command on a switch; returns its output."""
        if switch not in self.net.switches:
            raise FabricError(f"no switch named {switch!r} (switches: {', '.join(self.net.switches)})")
        return self.net.switches[switch].cli(command)

    # --- scripting: commands in nodes, faults, ranks, the Mininet CLI -----------------------------------------
    def run(self, node: str, command: str) -> str:
        """Run a shell command in ``node``'s namespace (a server ``s0``, a switch ``p0l0``, ...) and return its
        output (stdout and stderr).  As in the Mininet CLI's ``NODE CMD``, server/NIC names among the words
        become NIC addresses: ``fab.run("s0", "ping -c1 s1:1")`` pings s1's rail-1 NIC."""
        from emu.fabric_shell import substitute

        nodes = {n.name: n for n in self.net.nodes()}
        if node not in nodes:
            raise FabricError(f"no node named {node!r} (servers s0..s{len(self.topo.servers) - 1}, switches "
                              f"{', '.join(self.net.switches)})")
        with self.lock:
            return nodes[node].cmd(" ".join(substitute(self.topo, w) for w in command.split(" ")))

    def fault(self, action: str, target: str, value: str | float | None = None) -> Any:
        """Inject a fault as ``starpulse fabric fault ACTION TARGET [VALUE]`` does (``emu.faults``: link_down,
        link_up, slow_link, restore_link, loss, delay, switch_stop, switch_start, slow_gpu, restore_gpu, slow_nic,
        restore_nic, flap, congest, uncongest, pfc_storm, restore_pfc); returns the logged ``FaultEvent``.  A bad
        action, link or value raises ``FaultError`` with the CLI's line."""
        if self.faults is None:
            raise FabricError("fabric is not up")
        with self.lock:
            event = self.faults.apply(action, target, None if value is None else str(value))
        self._republish()
        return event

    def launch(self, command: list[str], *, logdir: str | None = None, timeout_s: float | None = None,
               echo: Any = print, **kwargs: Any) -> Any:
        """Run ``command`` once per GPU rank in its server's namespace with the env ``starpulse run`` gives
        (RANK, WORLD_SIZE, STARPULSE_STORE, STARPULSE_NIC_ADDR, ...; ``emu.launch.launch``, whose keyword
        options ``net``/``intra_rate``/``env`` pass through); returns the ``JobResult`` (``exit_code``).  Rank
        output lines go to ``echo`` prefixed ``[rank N]``; logs to ``logdir`` (default: the fabric's workdir)."""
        from emu.launch import launch

        pids = self.net.node_pids()
        return launch(self.topo, {s: pids[s] for s in self.topo.servers}, command,
                      logdir=Path(logdir) if logdir else self.workdir / "ranks", timeout_s=timeout_s,
                      echo=echo, clock=self.clock, **kwargs)

    def cli(self) -> None:
        """Drop into the fabric-aware Mininet CLI (``emu.fabric_shell``, the shell of ``fabric up --cli``) until
        exit, quit or Ctrl-D; the fabric stays up afterwards (``down``/the ``with`` block ends it)."""
        from emu.fabric_shell import FabricShell

        FabricShell(self, name=self.name or "script", lock=self.lock,
                    stop_requested=lambda: self.stop_requested, on_fault=self._republish)

    # --- status ---------------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Per switch and port, per link, and totals: packets, queues, ECN marks, drops (``emu.status``); with
        PFC on also its counters per port, per link direction (from the sending switch port) and in total."""
        status = fabric_status(self)
        if self.pfc.enabled:
            self._add_pfc_status(status)
        return status

    def _add_pfc_status(self, status: dict[str, Any]) -> None:
        """PFC counters summed over priorities (``pfc_*`` keys) and per priority (``pfc_priorities``: only the
        priorities with a non-zero counter) per port and link direction; totals, and totals per priority."""
        totals = dict.fromkeys(PFC_COUNTERS, 0)
        by_prio = {str(p): dict.fromkeys(PFC_COUNTERS, 0) for p in range(8)}
        for name, entry in status["switches"].items():
            if not entry["running"]:
                continue
            cli = self.net.switches[name].cli
            stats = parse_port_stats(cli("port_stats"))
            rows: dict[int, dict[str, dict[str, int]]] = {}
            for row in parse_table(cli("pfc_stats")):
                counts = {k: int(row.get(k[len("pfc_"):], 0)) for k in PFC_COUNTERS}
                if any(counts.values()):
                    rows.setdefault(int(row["port"]), {})[str(row["prio"])] = counts
            for port, p in entry["ports"].items():
                s = stats.get(int(port), {})
                for k in PFC_COUNTERS:
                    p[k] = s.get(k, 0)
                    totals[k] += p[k]
                p["pfc_priorities"] = rows.get(int(port), {})
                for prio, counts in p["pfc_priorities"].items():
                    for k, v in counts.items():
                        by_prio[prio][k] += v
        for link, entry in zip(self.topo.links, status["links"], strict=True):
            for direction, (src, src_port) in (("a_to_b", (link.a, link.a_port)), ("b_to_a", (link.b, link.b_port))):
                port = status["switches"].get(src, {}).get("ports", {}).get(str(src_port))
                if port is not None and direction in entry:
                    entry[direction].update({k: port.get(k, 0) for k in PFC_COUNTERS})
                    entry[direction]["pfc_priorities"] = port.get("pfc_priorities", {})
        prio = self.spec.pfc_priority
        status["pfc"] = {"enabled": True, "xoff_bytes": self.pfc.xoff_bytes, "xon_bytes": self.pfc.xon_bytes,
                         "headroom_bytes": self.pfc.headroom_bytes, "watchdog_ms": self.pfc.watchdog_ms,
                         "priority": prio, "lossless_priorities": list(range(8)) if prio is None else [prio],
                         "dscp_map": {} if prio is None else {str(d): p for d, p in dscp_priority_map(prio).items()},
                         "totals": totals, "totals_by_priority": by_prio}

    def lag(self) -> dict[str, LagStats]:
        """Every component's lateness so far: each running embedded switch's ingress and TM (``lag_stats``)
        and what link emulators, NICs and throttles of this fabric's processes reported into ``lag_dir``."""
        out: dict[str, LagStats] = {}
        if self.backend == "embedded" and self.fnet is not None:
            for name, sw in self.fnet.switches.items():
                try:
                    comps = parse_lag_json(sw.cli("lag_stats json"))
                except Exception:  # a stopped switch has no lag to report (status says so)
                    continue
                out.update({f"{name} {comp}": s for comp, s in comps.items()})
        if self.lag_dir is not None and self.lag_dir.is_dir():
            write_lag_file(str(self.lag_dir))       # this process's own components (NICs driven from here)
            out.update(read_lag_dir(self.lag_dir))
        return out

    def fidelity(self) -> dict[str, Any]:
        """The run's ``fidelity`` verdict over every component (``sw.clock.lag.fidelity``)."""
        return fidelity(self.lag(), self.clock.dilation)

    # --- traffic (``emu.traffic``) -------------------------------------------------------------------------------
    def probe(self, pairs: list[tuple[str, str]], *, timeout_ms: int = 400, retries: int = 4,
              port: int = PROBE_PORT) -> list[dict[str, Any]]:
        """UDP probes between NIC addresses (``emu.probe`` in every involved host); one result per pair."""
        return traffic.probe(self, pairs, timeout_ms=timeout_ms, retries=retries, port=port)

    def send_flows(self, src_ip: str, dst_ip: str, count: int, *, port: int = PROBE_PORT,
                   seed: int | None = None) -> int:
        """``count`` one-packet UDP flows src -> dst from distinct random source ports (the ECMP entropy)."""
        return traffic.send_flows(self, src_ip, dst_ip, count, port=port, seed=seed)

    def send_through(self, src_ip: str, dst_ip: str, *, packets: int, pps: float, payload_bytes: int,
                     idle_pairs: list[tuple[str, str]] | None = None, port: int = PROBE_PORT
                     ) -> tuple[list[list[int]], list[dict[str, Any]]]:
        """Paced ECN-capable UDP src -> dst recorded per packet (ECN, last hop's INT) by a sink; ``idle_pairs``
        probed meanwhile.  Returns (sink rows, idle probe results)."""
        return traffic.send_through(self, src_ip, dst_ip, packets=packets, pps=pps, payload_bytes=payload_bytes,
                                    idle_pairs=idle_pairs, port=port)

    def int_collector(self) -> traffic.ReportCollector:
        """Capture INT reports at the collector (report mode): ``with fab.int_collector() as c: ...; c.reports``."""
        return traffic.int_collector(self)

    def port_counters(self, switch: str) -> dict[int, dict[str, int]]:
        """``port_stats`` of one switch (embedded backend): rx/tx/drops/queue per port number."""
        return parse_port_stats(self.switch_cli(switch, "port_stats"))
