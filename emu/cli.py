"""``starpulse fabric``: up (until ``down``, or into the Mininet CLI), status, down, test, fault.

The command side: argument parsing, checks and printing.  ``up`` hands the built fabric to the fabric daemon
(``emu.fabric_daemon``: state file and JSON-lines control socket), which ``status``, ``fault`` and ``down`` from
other shells reach.  Topology flags (a contract): ``--servers N --gpus-per-server R
--pods P --spines S --link-rate RATE --delay D --mtu M --backend embedded|bmv2 [--oversubscription X] [--seed N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

from emu.fabric_daemon import (
    DEFAULT_NAME,
    FabricCliError,
    claim_state_dir,
    pid_alive,
    read_state,
    request,
    run_fabric,
    state_dir,
    summary_line,
)
from p4.switch.trace import LEVELS
from sw.clock import get_clock, set_clock
from sw.clock.lag import add_strict_fidelity_flag, fidelity_exit
from sw.collectives.fabric_topology import DEFAULT_FABRIC_MTU, TopologySpec
from sw.units import (
    MAX_LINK_DELAY_NS,
    MAX_LINK_RATE_BPS,
    AutoDilation,
    add_time_dilation_flag,
    float_flag,
    int_flag,
    parse_duration_ns,
    parse_rate_bps,
)
from sw.units.cli_guard import ArgumentParser, call_guarded

DEFAULT_PFC_PRIORITY = 3
DOWN_TIMEOUT_NS = 120_000_000_000
PFC_MAX_BYTES = 1 << 24        # XOFF/XON/headroom: 16 MiB, more than a shallow-buffer switch port ever holds
PFC_MAX_WATCHDOG_MS = 60_000.0


# --- arguments ----------------------------------------------------------------------------------------------
def add_topology_arguments(p: argparse.ArgumentParser) -> None:
    """The topology flags shared by ``up`` and ``test`` (and by other commands that bring up a fabric)."""
    g = p.add_argument_group("topology")
    g.add_argument("--servers", type=int, default=4, metavar="N", help="servers (default 4)")
    g.add_argument("--gpus-per-server", type=int, default=2, metavar="R", help="GPUs = NICs = rails (default 2)")
    g.add_argument("--pods", type=int, default=1, metavar="P", help="pods (default 1)")
    g.add_argument("--spines", type=int, default=2, metavar="S", help="spines, 0 = rail-only (default 2)")
    g.add_argument("--link-rate", default="100M", metavar="RATE", help="host link rate, e.g. 100M, 1G (default 100M)")
    g.add_argument("--delay", default="0", metavar="D",
                   help="per-link one-way delay, e.g. 10us (> 0 runs a link emulator on every link)")
    g.add_argument("--mtu", type=int, default=DEFAULT_FABRIC_MTU, metavar="M",
                   help=f"MTU in bytes, 576..9216 (default {DEFAULT_FABRIC_MTU}: jumbo, RoCE path MTU 4096)")
    g.add_argument("--backend", default="embedded", metavar="embedded|bmv2",
                   help="P4 target: our embedded switch or BMv2 simple_switch (default embedded)")
    g.add_argument("--control", default="cli", choices=("cli", "p4runtime"),
                   help="how the control plane writes the switches' table entries: the control socket's CLI "
                        "commands, or P4Runtime (gRPC; embedded backend) (default cli)")
    g.add_argument("--oversubscription", type=float, default=1.0, metavar="X",
                   help="leaf downlink/uplink capacity ratio, >= 1 (default 1)")
    g.add_argument("--seed", type=int_flag(0, 2**32 - 1), default=1, metavar="N",
                   help="seed of randomized choices (default 1)")
    g.add_argument("--pfc", default="off", metavar="on|off", help="priority flow control on every switch port "
                   "(embedded backend; default off)")
    g.add_argument("--pfc-xoff", type=int_flag(1, PFC_MAX_BYTES), default=None, metavar="BYTES",
                   help="PFC: pause the upstream when an ingress port x priority holds this much (default 48000)")
    g.add_argument("--pfc-xon", type=int_flag(1, PFC_MAX_BYTES), default=None, metavar="BYTES",
                   help="PFC: resume it at this much (default 24000)")
    g.add_argument("--pfc-headroom", type=int_flag(0, PFC_MAX_BYTES), default=None, metavar="BYTES",
                   help="PFC: in-flight allowance above XOFF before dropping (default 32000)")
    g.add_argument("--pfc-watchdog", type=float_flag(0, PFC_MAX_WATCHDOG_MS, unit="ms"), default=None, metavar="MS",
                   help="PFC: stop honouring pauses on a port paused longer than MS (default 0 = off)")
    g.add_argument("--pfc-priority", type=int, default=DEFAULT_PFC_PRIORITY, metavar="P",
                   help="PFC: the lossless priority: RoCE (DSCP 26) goes there, CNPs (DSCP 48) to strict priority 6, "
                        "all else to lossy 0; ranks' NICs honour pauses of P (default 3)")


def spec_from_args(args: argparse.Namespace) -> TopologySpec:
    """A validated ``TopologySpec`` from the topology flags; bad values raise a one-line user error."""
    if args.backend not in ("embedded", "bmv2"):
        raise FabricCliError(f"--backend {args.backend}: allowed embedded or bmv2")
    rate_bps = parse_rate_bps(args.link_rate, what="--link-rate", max_bps=MAX_LINK_RATE_BPS)
    delay_ns = parse_duration_ns(args.delay, what="--delay", default_unit="ns", max_ns=MAX_LINK_DELAY_NS)
    pfc_priority = getattr(args, "pfc_priority", DEFAULT_PFC_PRIORITY)
    if getattr(args, "pfc", "off") != "on":
        if pfc_priority != DEFAULT_PFC_PRIORITY:
            raise FabricCliError(f"--pfc-priority {pfc_priority}: needs --pfc on")
        pfc_priority = None
    return TopologySpec(servers=args.servers, gpus_per_server=args.gpus_per_server, pods=args.pods,
                        spines=args.spines, link_rate_bps=rate_bps, delay_ns=delay_ns, mtu=args.mtu,
                        oversubscription=args.oversubscription, seed=args.seed, pfc_priority=pfc_priority)


def pfc_from_args(args: argparse.Namespace) -> Any:
    """The ``PfcSettings`` of the ``--pfc*`` flags; bad values raise a one-line user error."""
    from emu.fabric import PfcSettings

    pfc = getattr(args, "pfc", "off")
    if pfc not in ("on", "off"):
        raise FabricCliError(f"--pfc {pfc}: allowed on or off")
    given = {f"--pfc-{k}": getattr(args, f"pfc_{k}", None) for k in ("xoff", "xon", "headroom", "watchdog")}
    if pfc == "off":
        for flag, value in given.items():
            if value is not None:
                raise FabricCliError(f"{flag} {value:g}: PFC is off; add --pfc on (or drop {flag})")
        return PfcSettings()
    d = PfcSettings()
    xoff, xon, headroom, watchdog = (d_ if v is None else v for v, d_ in zip(
        given.values(), (d.xoff_bytes, d.xon_bytes, d.headroom_bytes, d.watchdog_ms), strict=True))
    if not 0 < xon <= xoff:
        raise FabricCliError(f"--pfc-xon {xon} / --pfc-xoff {xoff}: need 0 < XON <= XOFF bytes")
    if args.backend != "embedded":
        raise FabricCliError(f"--pfc on: needs --backend embedded (backend {args.backend} has no PFC)")
    return PfcSettings(True, xoff, xon, headroom, watchdog)


def add_up_arguments(up: argparse.ArgumentParser) -> None:
    """Every flag of ``fabric up`` but ``--cli``: the topology, INT sink, impairable links, logs, pcaps, name
    (``emu.fabric.Fabric``'s keyword options are parsed by these, so the API and the CLI check alike)."""
    add_topology_arguments(up)
    up.add_argument("--int-sink", choices=("host", "report"), default="host",
                    help="INT at the last hop: leave the stack for the receiver (host) or strip it and send a "
                         "report to a collector host wired to every leaf (report)")
    up.add_argument("--impairable", metavar="LINKS", help="links built through a link emulator so loss/delay "
                    "faults work on them: A:B[,A:B...] or 'all' (one process per link; --delay implies all)")
    up.add_argument("--log-level", default="warn", choices=sorted(LEVELS, key=LEVELS.__getitem__),
                    help="switch log level (default warn)")
    up.add_argument("--pcap", metavar="DIR", help="every switch writes <iface>_in/_out.pcap per port into DIR "
                    "(created if missing, only inside an existing directory)")
    up.add_argument("--name", default=DEFAULT_NAME, help=f"which running fabric (default {DEFAULT_NAME})")
    up.add_argument("--ops", nargs="?", const="on", default="off", choices=("on", "off"),
                    help="operations telemetry: poll every switch's port counters into the run's store for "
                         "`starpulse ops` (ranks of train jobs record there too; default off, on for `run`)")
    add_time_dilation_flag(up)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="fabric_command", metavar="SUBCOMMAND", required=True)

    def named(p: argparse.ArgumentParser) -> None:
        p.add_argument("--name", default=DEFAULT_NAME, help=f"which running fabric (default {DEFAULT_NAME})")

    up = sub.add_parser("up", help="bring a fabric up; runs until `starpulse fabric down` (or --cli exits)")
    add_up_arguments(up)
    up.add_argument("--cli", action="store_true", help="drop into the Mininet CLI; leaving it tears down")

    st = sub.add_parser("status", help="per-port counters, queue high-water marks, ECN marks, drops")
    st.add_argument("--json", action="store_true", help="print JSON")
    add_strict_fidelity_flag(st)
    named(st)

    dn = sub.add_parser("down", help="tear the running fabric down")
    named(dn)

    te = sub.add_parser("test", help="up, reachability + INT hops + ECMP + reroute checks, down; exit 0 if all pass")
    add_topology_arguments(te)
    te.add_argument("--int-sink", choices=("host", "report"), default="host", help="INT sink mode to test")
    te.add_argument("--json", action="store_true", help="print JSON")

    fa = sub.add_parser("fault", help="inject a fault into the running fabric (logged as JSON lines)")
    fa.add_argument("action", nargs="?", help="link_down|link_up|slow_link|restore_link|loss|delay|"
                                              "switch_stop|switch_start|slow_gpu|restore_gpu|slow_nic|restore_nic|"
                                              "flap|congest|uncongest|pfc_storm|restore_pfc")
    fa.add_argument("target", nargs="?", help="link A:B (e.g. p0l0:sp0, s0:p0l0), switch name, rank (slow_gpu), "
                                              "NIC (slow_nic, congest: e.g. s1-eth0) or HOST[:RAIL] (pfc_storm: "
                                              "e.g. s1:0, that NIC sends PFC pauses; needs --pfc on)")
    fa.add_argument("value", nargs="?", help="slow_link: rate (e.g. 10M); loss: percent; delay: extra (e.g. 5ms); "
                                             "slow_gpu: compute factor 1..1000 (e.g. 3); slow_nic: the NIC's rate "
                                             "(e.g. 30M); flap: period, network time (e.g. 2s); congest: "
                                             "foreign traffic's rate into the NIC (e.g. 60M)")
    fa.add_argument("--script", metavar="FILE", help="replay '[+T] ACTION TARGET [VALUE]' lines")
    named(fa)

    be = sub.add_parser("bench", help="line-rate RoCE on every NIC for a bounded time: packet-hops per wall second, "
                                      "CPU per component, fidelity (and the highest rate that keeps it)")
    add_bench_arguments(be)


def add_bench_arguments(be: argparse.ArgumentParser) -> None:
    """``fabric bench``'s flags: the topology's, the dilation, and what to offer for how long."""
    from emu.fabric_bench import PATTERNS
    from sw.roce.native.datapath import DATAPATHS

    add_topology_arguments(be)
    add_time_dilation_flag(be)
    be.set_defaults(int_sink="host")
    be.add_argument("--pattern", default="all-to-all", choices=PATTERNS, help="who sends to whom (default all-to-all)")
    be.add_argument("--load", type=float_flag(1e-3, 1.0), default=1.0, metavar="F",
                    help="offered rate per NIC as a fraction of line rate, 0.001..1 (default 1: line rate)")
    be.add_argument("--seconds", type=float_flag(0.5, 600.0, unit="s"), default=5.0, metavar="S",
                    help="wall seconds of traffic per run, 0.5..600 (default 5)")
    be.add_argument("--find-max-rate", action="store_true",
                    help="also search (halving, then bisecting) for the highest load that stays fidelity.ok")
    be.add_argument("--datapath", default="native", choices=DATAPATHS,
                    help="NIC data path: C through cffi (native, default; python with a warning when no compiler) "
                         "or the Python reference")
    be.add_argument("--json", action="store_true", help="print the result as JSON")
    be.add_argument("--plot", metavar="FILE", help="PNG: CPU per component (and forwarded vs offered load)")


# --- output -------------------------------------------------------------------------------------------------
def output_dir(flag: str, path: str, *, create: bool = True) -> Path:
    """``path`` of an output flag (``--pcap``, ``--logdir``) as a directory, created (``create``) only inside an
    existing one: a typo such as /nonexisting/x must not grow a tree."""
    d = Path(path).expanduser().resolve()
    if d.is_dir():
        return d
    if d.exists():
        raise FabricCliError(f"{flag} {path}: exists and is not a directory")
    if not d.parent.is_dir():
        raise FabricCliError(f"{flag} {path}: its parent {d.parent} does not exist (only the last level is created)")
    if not create:
        return d
    try:
        d.mkdir()
    except OSError as exc:
        raise FabricCliError(f"{flag} {path}: cannot create it ({exc.strerror})") from None
    return d


# --- commands -----------------------------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    cmd = args.fabric_command
    if cmd == "up":
        return _up(args)
    if cmd == "status":
        return _status(args)
    if cmd == "down":
        return _down(args)
    if cmd == "test":
        return _test(args)
    if cmd == "fault":
        return _fault(args)
    if cmd == "bench":
        return _bench(args)
    raise AssertionError(cmd)


def _make_fabric(args: argparse.Namespace, **kwargs: Any):
    """The ``Fabric`` the topology flags describe (not yet up)."""
    from emu.fabric import Fabric

    return Fabric(**fabric_options(args), **kwargs)


def fabric_options(args: argparse.Namespace) -> dict[str, Any]:
    """``Fabric`` keyword arguments (spec, backend, int_sink, pfc) of checked topology flags; a one-line user
    error names the first bad flag."""
    from emu.p4switch import missing_bmv2_tools

    spec = spec_from_args(args)
    if args.backend == "bmv2":
        _check_bmv2_compat()
    if args.backend == "bmv2" and missing_bmv2_tools():
        raise FabricCliError(f"--backend bmv2: needs {', '.join(missing_bmv2_tools())} on PATH (not installed "
                             "here); use --backend embedded")
    control = getattr(args, "control", "cli")
    if control == "p4runtime" and args.backend != "embedded":
        raise FabricCliError(f"--control p4runtime: needs --backend embedded (backend {args.backend} is programmed "
                             "through its CLI)")
    return {"spec": spec, "backend": args.backend, "int_sink": args.int_sink, "pfc": pfc_from_args(args),
            "control": control}


class _OptionParser(ArgumentParser):
    """``fabric up``'s flags for Python callers: a bad value raises ``FabricCliError`` with argparse's line."""

    def error(self, message: str) -> NoReturn:
        raise FabricCliError(message)


def parse_up_options(options: dict[str, Any]) -> argparse.Namespace:
    """``fabric up``'s flags from keyword options (``link_rate="1G"`` is ``--link-rate 1G``, ``pfc=True`` is
    ``--pfc on``), parsed and checked by the CLI's own parser; an unknown option names the allowed ones."""
    parser = _OptionParser(prog="starpulse fabric up", add_help=False)
    add_up_arguments(parser)
    known = {a.dest for a in parser._actions}
    argv: list[str] = []
    for key, value in options.items():
        if key not in known:
            raise FabricCliError(f"Fabric({key}=...): unknown option (allowed: {', '.join(sorted(known))})")
        if value is None:
            continue
        if isinstance(value, bool):
            value = "on" if value else "off"
        elif isinstance(value, list | tuple):
            value = ",".join(map(str, value))
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return parser.parse_args(argv)


def _check_bmv2_compat() -> None:
    """Before building anything: the fabric program must be one p4c's BMv2 back end accepts (file:line:col if not)."""
    from emu import fabric
    from p4.compat_bmv2 import check_pass
    from p4.compiler import compile_file
    from p4.errors import P4Error

    try:
        compile_file(fabric.FABRIC_P4, checks=(check_pass("bmv2"),))
    except P4Error as exc:
        first = f"{exc.pos}: error: {exc.message}" if exc.pos else exc.message
        raise FabricCliError(f"--backend bmv2: {first}") from None


def _up(args: argparse.Namespace) -> int:
    name = args.name
    # every flag is checked before anything is created, also before `auto` calibrates on fabrics of these flags
    _make_fabric(args, wired_links=args.impairable)
    pcap_dir = str(output_dir("--pcap", args.pcap)) if args.pcap else None
    _choose_dilation(args)
    d = claim_state_dir(name)
    fab = _make_fabric(args, log_level=args.log_level, fault_log=str(d / "faults.jsonl"),
                       wired_links=args.impairable, ops=args.ops == "on")
    if pcap_dir:
        fab.pcap_dir = pcap_dir
    return run_fabric(fab, name, d, shell=args.cli)


def _choose_dilation(args: argparse.Namespace) -> None:
    """``--time-dilation``: a number as given, else ($STARPULSE_TIME_DILATION unset, or ``auto``) calibrated on
    a fabric of these flags (``emu.calibrate``); exported for the switches and recorded in state.json."""
    from emu.calibrate import resolve_dilation

    chosen = resolve_dilation(getattr(args, "time_dilation", None))
    if isinstance(chosen, AutoDilation):
        if read_state(args.name) is not None:       # the same one-line error as up's, before calibrating
            raise FabricCliError(f"a fabric named {args.name!r} is already running; run `starpulse fabric down` "
                                 "first or pick another --name")
    apply_dilation(chosen, lambda c: _make_fabric(args, clock=c))


def apply_dilation(chosen: float | AutoDilation, make: Any) -> Any:
    """Make ``chosen`` (a number, or ``auto``: calibrated on fabrics ``make(clock)`` builds) the process's one
    clock and $STARPULSE_TIME_DILATION (the switches and ranks started later inherit it); returns the clock."""
    from emu.calibrate import calibrate_dilation
    from sw.clock import ENV_DILATION, Clock

    if isinstance(chosen, AutoDilation):
        chosen = calibrate_dilation(make, chosen, echo=lambda line: print(line, flush=True))
    os.environ[ENV_DILATION] = repr(float(chosen))
    clock = Clock(float(chosen))
    set_clock(clock)
    return clock


def _down(args: argparse.Namespace) -> int:
    state = read_state(args.name)
    if state is None:
        print(f"no fabric named {args.name!r} is running")
        return 0
    pid = int(state["pid"])
    try:
        request(args.name, {"op": "down"}, timeout_s=30.0)
    except FabricCliError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    clock = get_clock()
    deadline = clock.now_ns() + DOWN_TIMEOUT_NS
    state_file = state_dir(args.name) / "state.json"
    while pid_alive(pid) and state_file.exists():   # a script's fabric (emu.fabric) goes, its process stays
        if clock.now_ns() > deadline:
            raise FabricCliError(f"fabric {args.name!r} (pid {pid}) did not stop within "
                                 f"{DOWN_TIMEOUT_NS / 1e9:.0f} s")
        clock.sleep_ns(100_000_000)
    print(f"fabric {args.name!r} is down")
    return 0


def _status(args: argparse.Namespace) -> int:
    status = request(args.name, {"op": "status"})["status"]
    if args.json:
        print(json.dumps(status, indent=2))
    else:
        print_status(args.name, status)
    return fidelity_exit(status.get("fidelity"), args.strict_fidelity)


def print_status(fabric_name: str, status: dict[str, Any]) -> None:
    """The table `fabric status` prints (the CLI's `status` too)."""
    t = status["totals"]
    print(f"fabric {fabric_name!r} ({status['backend']}): rx {t['rx_pkts']} tx {t['tx_pkts']} packets, "
          f"ECN marks {t['ecn_marks']}, drops {t['drops']}")
    faults = status.get("faults") or {}
    if any(faults.values()):
        print(f"active faults: {json.dumps(faults)}")
    print(f"{'switch':<6} {'port':>4} {'iface':<12} {'peer':<10} {'up':>2} {'rx_pkts':>9} {'tx_pkts':>9} "
          f"{'q_hw':>5} {'q_drop':>6} {'ecn':>6}")
    for name, sw in status["switches"].items():
        if not sw["running"]:
            state = sw.get("state", "stopped")
            exit_code = f", exit {sw['exit_code']}" if sw.get("exit_code") is not None else ""
            print(f"{name:<6} ({state.upper() if state == 'dead' else state}{exit_code})")
            continue
        for port, p in sw["ports"].items():
            print(f"{name:<6} {port:>4} {p['iface']:<12} {p['peer']:<10} {int(p['up']):>2} {p['rx_pkts']:>9} "
                  f"{p['tx_pkts']:>9} {p['high_water_pkts']:>5} {p['queue_drop_pkts']:>6} {p['ecn_marks']:>6}")
        drops = {k: v for k, v in sw["drop_reasons"].items() if v}
        if drops:
            print(f"{name:<6} drops: {', '.join(f'{k}={v}' for k, v in drops.items())}")
        lost = [f"port {port} {k}={p[k]}" for port, p in sw["ports"].items()
                for k in ("rx_kernel_drops", "pipeline_drop_pkts") if p.get(k)]
        if lost:
            print(f"{name:<6} lost: {', '.join(lost)}")
    host_lost = [f"{host} {k}={v}" for host, h in status.get("hosts", {}).items()
                 for k, v in (("udp_rcvbuf_errors", h["udp_rcvbuf_errors"]),
                              *((f"{i} rx_dropped", n["rx_dropped"]) for i, n in h["nics"].items())) if v]
    if host_lost:
        print(f"host drops: {', '.join(host_lost)}")
    if status.get("pfc"):
        _print_pfc(status)
    fid = status.get("fidelity")
    if fid:
        print(f"fidelity: {'ok' if fid['ok'] else 'NOT ok'} at time dilation {fid['time_dilation']:g} (worst "
              f"{fid['worst_component']}: {fid['late_share'] * 100:.2f} % late, lag p99 {fid['lag_p99_ns']} ns)")


def _print_pfc(status: dict[str, Any]) -> None:
    """PFC counters per link direction (from the sending switch port), then totals."""
    pfc = status["pfc"]
    t = pfc["totals"]
    print(f"PFC on (XOFF {pfc['xoff_bytes']} B, XON {pfc['xon_bytes']} B, headroom {pfc['headroom_bytes']} B, "
          f"watchdog {pfc['watchdog_ms']:g} ms): pauses sent {t['pfc_pauses_sent']} received {t['pfc_pauses_rx']}, "
          f"XOFF events {t['pfc_xoff_events']}, headroom drops {t['pfc_headroom_drop_pkts']}, "
          f"watchdog trips {t['pfc_watchdog_trips']}")
    if pfc.get("priority") is not None:
        sent = {p: c["pfc_pauses_sent"] for p, c in pfc.get("totals_by_priority", {}).items() if c["pfc_pauses_sent"]}
        dscp_map = ", ".join(f"{d}->{p}" for d, p in pfc["dscp_map"].items())
        print(f"lossless priority {pfc['priority']} (DSCP map {dscp_map}, else 0 lossy); pauses sent by priority: "
              f"{sent or 'none'}")
    print(f"{'link':<16} {'dir':<6} {'pause_tx':>8} {'pause_rx':>8} {'paused_ms':>9} {'xoff':>6} {'hr_drop':>7} "
          f"{'wd':>3}")
    for link in status["links"]:
        for direction in ("a_to_b", "b_to_a"):
            d = link.get(direction, {})
            if "pfc_pauses_sent" not in d or not any(d[k] for k in d if k.startswith("pfc_")):
                continue
            print(f"{link['link']:<16} {direction:<6} {d['pfc_pauses_sent']:>8} {d['pfc_pauses_rx']:>8} "
                  f"{d['pfc_paused_ns'] / 1e6:>9.1f} {d['pfc_xoff_events']:>6} {d['pfc_headroom_drop_pkts']:>7} "
                  f"{d['pfc_watchdog_trips']:>3}")


def _fault(args: argparse.Namespace) -> int:
    if args.script:
        try:
            text = Path(args.script).read_text()
        except OSError as exc:
            raise FabricCliError(f"--script {args.script}: {exc.strerror}") from None
        reply = request(args.name, {"op": "script", "text": text}, timeout_s=3600.0)
    else:
        if not args.action or not args.target:
            raise FabricCliError("fault: give ACTION TARGET [VALUE] (e.g. link_down p0l0:sp0) or --script FILE")
        reply = request(args.name, {"op": "fault", "action": args.action, "target": args.target,
                                    "value": args.value})
    print_fault_events(reply["events"])
    return 0


def print_fault_events(events: list[dict[str, Any]]) -> None:
    """One line per applied fault event (as `fabric fault` and the CLI's `fault`/`link` print them)."""
    for e in events:
        print(f"{e['time_utc']} {e['action']} {e['target']}{' ' + e['value'] if e['value'] else ''}: ok"
              f"{' (changed: ' + ', '.join(e['changed']) + ')' if e['changed'] else ''}")


def _bench(args: argparse.Namespace) -> int:
    from emu.calibrate import resolve_dilation
    from emu.fabric_bench import plot, run_bench

    if args.backend != "embedded":
        raise FabricCliError(f"--backend {args.backend}: fabric bench needs --backend embedded (it reads the "
                             "switches' port counters and lag through their control sockets)")
    if args.plot and not Path(args.plot).expanduser().resolve().parent.is_dir():
        raise FabricCliError(f"--plot {args.plot}: its folder {Path(args.plot).expanduser().resolve().parent} does "
                             "not exist")
    apply_dilation(resolve_dilation(args.time_dilation), lambda c: _make_fabric(args, clock=c))
    echo = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    with _make_fabric(args) as fab:
        result = run_bench(fab, pattern=args.pattern, fraction=args.load, wall_s=args.seconds,
                           datapath=args.datapath, find_max_rate=args.find_max_rate, echo=echo)
    if args.plot:
        plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=1))
    elif result.get("rate_search") is not None:
        print(f"highest load that stays fidelity.ok: {result['max_ok_fraction']} x line rate")
    return 0


def _test(args: argparse.Namespace) -> int:
    from emu.checks import run_checks
    from emu.status import spec_dict

    fab = _make_fabric(args)
    checks = []
    try:
        fab.up()
        if not args.json:
            print(f"fabric up in {fab.timings.up_s:.1f} s: {summary_line(fab)}", flush=True)
        checks = run_checks(fab)
        totals = fab.status()["totals"]
    finally:
        fab.down()
    ok = bool(checks) and all(c.ok for c in checks)
    if args.json:
        print(json.dumps({"ok": ok, "topology": spec_dict(fab.spec),
                          "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail, "data": c.data}
                                     for c in checks],
                          "totals": totals, "up_s": fab.timings.up_s, "down_s": fab.timings.down_s}, indent=2))
    else:
        for c in checks:
            print(f"{'PASS' if c.ok else 'FAIL'} {c.name}: {c.detail}")
        print(f"fabric down in {fab.timings.down_s:.1f} s; {'all checks passed' if ok else 'FAILED'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m emu.cli ...``: the same command without the ``starpulse`` dispatcher (user errors exit 2)."""
    parser = ArgumentParser(prog="starpulse fabric")
    add_arguments(parser)
    return call_guarded("starpulse fabric", run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
