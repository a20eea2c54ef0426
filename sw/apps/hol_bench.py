"""Head-of-line blocking under PFC, measured: ``python -m sw.apps.hol_bench --json [--plot FILE]``.

Two pods, one spine, one NIC per server.  Pod 0 holds the incast senders and the victim's sender V, pod 1 the
incast receiver R and the victim's destination D.  An N->1 incast of RDMA WRITEs (``sw.apps.incast_bench``'s roles)
congests only leaf1's port toward R; the victim V->D (an RDMA WRITE of ``--victim-size``, started with the
incast) shares leaf0's uplink and the spine's port toward leaf1 with it, while D's port is idle.  With PFC,
leaf1 pauses the spine's queue toward it, the spine pauses leaf0's uplink queue, leaf0 pauses the senders —
and the victim's packets, queued behind the incast's in the same priority queues, stop too.

Scenarios (each in a fresh fabric): ``alone`` (the victim without the incast), ``pfc`` (incast, PFC, no CC),
``pfc_dcqcn`` (incast, PFC, DCQCN for every flow) and ``pfc_own_priority`` (no CC, the victim on another DSCP
and so another PFC priority and TM queue: not blocked).  Every switch maps DSCP 26 (RoCE) -> priority 3, 34 ->
4, 48 (CNP) -> 6, and classifies INT-over-UDP (DSCP 0x17) by the DSCP the INT shim keeps; each NIC honours
pauses of the priority it sends on.  Figures are network time (``sw.clock``, ``--dilation``).  Victim
throughput = its bytes / its completion time (first byte posted to the WRITE's completion).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from sw.clock import ENV_DILATION, Clock, get_clock
from sw.clock.lag import add_strict_fidelity_flag, combine_fidelity, fidelity_exit
from sw.units import AutoDilation, add_time_dilation_flag, parse_rate_bps, parse_size_bytes
from sw.units.plot import plot_figure

SCENARIOS = ("alone", "pfc", "pfc_dcqcn", "pfc_own_priority")
ROCE_DSCP, VICTIM_DSCP, CNP_DSCP, INT_DSCP = 26, 34, 48, 0x17
DSCP_PRIORITY = {ROCE_DSCP: 3, VICTIM_DSCP: 4, CNP_DSCP: 6}
GO_POLL_WALL_NS = 200_000
REPO = Path(__file__).resolve().parents[1]


class HolBenchError(RuntimeError):
    """Bad options or a run that could not finish: one line, exit 2."""

    is_user_error = True


DEFAULT_DILATION = 40.0


@dataclasses.dataclass(frozen=True)
class HolConfig:
    """One benchmark's settings (all sizes bytes, rates bit/s, times network time)."""

    senders: int = 8
    incast_bytes: int = 512 * 1024
    victim_bytes: int = 256 * 1024
    link_rate_bps: int = 100_000_000
    dilation: float | AutoDilation = DEFAULT_DILATION
    timeout_s: float = 60.0
    xoff_bytes: int = 40_000
    xon_bytes: int = 20_000
    headroom_bytes: int = 400_000   # what a CPU-starved Python NIC may still send before it reads the pause


# --- the victim's roles (in the servers' namespaces) -----------------------------------------------------------
def _victim_pattern(size: int) -> np.ndarray:
    return np.random.default_rng(4242).integers(0, 256, size, dtype=np.uint8)


def _open(args: argparse.Namespace) -> tuple[Any, int]:
    from sw.roce.softnic.port import interface_mtu, open_device, path_mtu_for

    nic = open_device(args.dev, line_rate_bps=args.link_rate_bps, cc=args.cc)
    return nic, path_mtu_for(interface_mtu(args.dev))


def run_victim_receiver(args: argparse.Namespace) -> dict[str, Any]:
    """One QP and a buffer for the victim's WRITE; serve until the sender reported, then verify the bytes."""
    from sw.roce.transport.qp_connect import connect, qp_info
    from sw.units.file_store import FileStore

    nic, mtu = _open(args)
    store, clock = FileStore(args.store), nic.clock
    pd, cq = nic.alloc_pd(), nic.create_cq()
    buf = np.zeros(args.size_bytes, np.uint8)
    mr = pd.reg_mr(buf)
    qp = nic.create_qp(pd, cq)
    store.set("victim_rx", qp_info(qp, 0, mr))
    deadline = clock.now_ns() + args.timeout_ns
    peer = store.wait("victim_tx", args.timeout_ns)
    connect(qp, 0, peer | {"mac": args.gateway_mac}, path_mtu=mtu, traffic_class=args.dscp << 2)
    store.set("victim_rx_ready", True)
    finished = nic.run_until(lambda: store.get("victim_res") is not None, max(1, deadline - clock.now_ns()))
    report = {"role": "victim-receiver", "finished": finished,
              "data_ok": bool(np.array_equal(buf, _victim_pattern(args.size_bytes)))}
    store.set("victim_rx_result", report)
    return report


def run_victim_sender(args: argparse.Namespace) -> dict[str, Any]:
    """Connect, wait for "go" (the incast's start signal), WRITE ``--size`` bytes, report the completion time."""
    from sw.roce.transport.qp_connect import connect, qp_info
    from sw.roce.transport.verbs import SendWr, WcStatus, WrOpcode
    from sw.units.file_store import FileStore

    nic, mtu = _open(args)
    store, clock = FileStore(args.store), nic.clock
    pd, cq = nic.alloc_pd(), nic.create_cq()
    mr = pd.reg_mr(_victim_pattern(args.size_bytes))
    qp = nic.create_qp(pd, cq)
    store.set("victim_tx", qp_info(qp, 0))
    deadline = clock.now_ns() + args.timeout_ns
    peer = store.wait("victim_rx", args.timeout_ns)
    connect(qp, 0, peer | {"mac": args.gateway_mac}, path_mtu=mtu, traffic_class=args.dscp << 2)
    store.set("victim_ready", True)
    poll_ns = max(1, int(clock.net_duration_ns(GO_POLL_WALL_NS)))
    while store.get("go") is None and clock.now_ns() < deadline:
        nic.poll(poll_ns)
    start_ns = clock.now_ns()
    qp.post_send(SendWr(1, WrOpcode.RDMA_WRITE, mr.sge(), remote_addr=int(peer["addr"]), rkey=int(peer["rkey"])))
    wcs: list[Any] = []

    def completed() -> bool:
        wcs.extend(cq.poll())
        return bool(wcs)

    finished = nic.run_until(completed, max(1, deadline - start_ns))
    end_ns = clock.now_ns()
    pfc = nic.pfc.as_dict(end_ns) if nic.pfc is not None else {}
    report = {"role": "victim-sender", "finished": finished, "bytes": args.size_bytes,
              "ok": bool(wcs) and wcs[0].status == WcStatus.SUCCESS, "completion_ns": end_ns - start_ns,
              "retransmissions": qp.counters.retransmitted_packets, "nic_pfc": pfc}
    store.set("victim_res", report)
    nic.run_until(lambda: store.get("victim_rx_result") is not None, max(1, deadline - clock.now_ns()))
    return report


# --- the benchmark -------------------------------------------------------------------------------------------
def _pick_servers(topo: Any, senders: int) -> dict[str, Any]:
    """Pod 0: incast senders (slots 0..N-1) and the victim's sender (slot N); pod 1: R (slot 0), D (slot 1)."""
    nics = {(n.pod, n.slot): n for s in topo.servers for n in topo.nics_of(s)}
    return {"senders": [nics[(0, k)] for k in range(senders)], "victim": nics[(0, senders)],
            "receiver": nics[(1, 0)], "victim_dst": nics[(1, 1)]}


def hol_spec(cfg: HolConfig) -> Any:
    """Two pods, one spine: the incast's senders and receiver, the victim and its destination, one per server."""
    from sw.collectives.fabric_topology import TopologySpec

    return TopologySpec(servers=2 * (cfg.senders + 1), gpus_per_server=1, pods=2, spines=1,
                        link_rate_bps=cfg.link_rate_bps)


def run_scenario(name: str, cfg: HolConfig, clock: Clock | None = None) -> dict[str, Any]:
    """One scenario in a fresh fabric; the switch processes take their dilation from $STARPULSE_TIME_DILATION."""
    from emu.control_plane import EcnConfig
    from emu.fabric import Fabric, PfcSettings
    from emu.status import priority_status
    from emu.traffic import stop_proc
    from sw.roce.softnic.port import ENV_NIC_PFC
    from sw.units.file_store import FileStore

    if name not in SCENARIOS:
        raise HolBenchError(f"scenario {name!r}: expected one of {', '.join(SCENARIOS)}")
    clock = clock or get_clock()
    cc = "dcqcn" if name == "pfc_dcqcn" else "none"
    victim_dscp = VICTIM_DSCP if name == "pfc_own_priority" else ROCE_DSCP
    with_incast = name != "alone"
    spec = hol_spec(cfg)
    pfc = PfcSettings(True, xoff_bytes=cfg.xoff_bytes, xon_bytes=cfg.xon_bytes, headroom_bytes=cfg.headroom_bytes)
    fab = Fabric(spec, ecn=EcnConfig(5, 20, 0.2), pfc=pfc, clock=clock)
    timeout = str(cfg.timeout_s)
    with fab, tempfile.TemporaryDirectory(prefix="starpulse-hol-") as store_dir:
        roles = _pick_servers(fab.topo, cfg.senders)
        for sw in fab.topo.switches:
            for port, rate_bps in fab.link_rates_bps(sw.name).items():
                # headroom covers what the upstream sends while the pause is on its way: it scales with the rate
                headroom = cfg.headroom_bytes * max(1, rate_bps // cfg.link_rate_bps)
                fab.switch_cli(sw.name, f"pfc_thresholds {port} {cfg.xoff_bytes} {cfg.xon_bytes} {headroom}")
            for dscp, prio in DSCP_PRIORITY.items():
                fab.switch_cli(sw.name, f"pfc_dscp_map {dscp} {prio}")
            fab.switch_cli(sw.name, f"pfc_dscp_map {INT_DSCP} int")
        store = FileStore(store_dir)
        env = dict(os.environ, PYTHONPATH=str(REPO), **{ENV_DILATION: repr(clock.dilation)})
        launches: list[tuple[Any, list[str], int]] = []      # (nic, argv, PFC priority)
        incast = [sys.executable, "-m", "sw.apps.incast_bench"]
        incast_common = ["--store", store_dir, "--size", str(cfg.incast_bytes), "--senders", str(cfg.senders),
                         "--cc", cc, "--link-rate", str(cfg.link_rate_bps), "--base-rtt", "1ms",
                         "--timeout", timeout]
        if with_incast:
            for k, nic in enumerate(roles["senders"]):
                launches.append((nic, [*incast, "sender", "--index", str(k), *incast_common], DSCP_PRIORITY[26]))
            launches.append((roles["receiver"], [*incast, "receiver", *incast_common], DSCP_PRIORITY[26]))
        me = [sys.executable, "-m", "sw.apps.hol_bench"]
        victim_common = ["--store", store_dir, "--size", str(cfg.victim_bytes), "--cc", cc, "--dscp",
                         str(victim_dscp), "--link-rate", str(cfg.link_rate_bps), "--timeout", timeout]
        victim_prio = DSCP_PRIORITY[victim_dscp]
        launches.append((roles["victim"], [*me, "victim-sender", *victim_common], victim_prio))
        launches.append((roles["victim_dst"], [*me, "victim-receiver", *victim_common], victim_prio))
        procs = []
        try:
            for nic, argv, prio in launches:
                procs.append(fab.net.hosts[nic.server].popen(
                    [*argv, "--dev", nic.ifname, "--gateway-mac", nic.gateway_mac],
                    env=dict(env, **{ENV_NIC_PFC: str(prio)}), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True))
            fab.helper_procs.extend(procs)
            keys = ["victim_ready", "victim_rx_ready"]
            if with_incast:
                keys += ["rx_ready", *(f"ready{i}" for i in range(cfg.senders))]
            end_ns = clock.now_ns() + int(cfg.timeout_s * 1e9)
            while not all(store.get(k) for k in keys):
                for p in procs:
                    if p.poll() is not None:
                        raise HolBenchError(f"a role exited early ({p.returncode}): "
                                            f"{(p.stderr.read() if p.stderr else '').strip().splitlines()[-1:]}")
                if clock.now_ns() > end_ns:
                    raise HolBenchError("the roles did not connect in time")
                clock.sleep_ns(5_000_000)
            for sw in fab.topo.switches:
                fab.switch_cli(sw.name, "port_stats_reset")
            store.set("go", True)
            outs = [p.communicate(timeout=cfg.timeout_s * clock.dilation + 60) for p in procs]
            status = fab.status()
            per_switch = priority_status(fab)
            prio_rows = {name: v["pfc"] for name, v in per_switch.items()}
            queue_rows = [r for v in per_switch.values() for r in v["queues"]]
        finally:
            for p in procs:
                stop_proc(p)
    reports = []
    for p, (out, err) in zip(procs, outs, strict=True):
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            raise HolBenchError(f"role failed (exit {p.returncode}): {err.strip().splitlines()[-1:] or out}")
        reports.append(json.loads(lines[-1]))
    victim, victim_rx = reports[-2], reports[-1]
    incast_senders = reports[:cfg.senders] if with_incast else []
    incast_rx = reports[cfg.senders] if with_incast else None

    def prio_sum(key: str, prio: int) -> int:
        return sum(r.get(key, 0) for rows in prio_rows.values() for r in rows if r.get("prio") == prio)

    totals = status.get("pfc", {}).get("totals", {})

    def queue_pauses(prio: int) -> int:
        """PFC pauses that held TM queue ``prio`` anywhere (8 queues per port: the queue of that priority)."""
        return sum(r["pauses"] for r in queue_rows if r["prio"] == prio)

    return {
        "scenario": name, "cc": cc, "victim_dscp": victim_dscp, "victim_priority": victim_prio,
        "incast_priority": DSCP_PRIORITY[ROCE_DSCP], "senders": cfg.senders if with_incast else 0,
        "link_rate_bps": cfg.link_rate_bps, "time_dilation": clock.dilation, "fidelity": status["fidelity"],
        "victim_bytes": cfg.victim_bytes, "victim_bytes_ok": bool(victim["ok"] and victim_rx["data_ok"]),
        "victim_completion_ns": victim["completion_ns"],
        "victim_throughput_bps": cfg.victim_bytes * 8e9 / max(1, victim["completion_ns"]),
        "victim_retransmissions": victim["retransmissions"],
        "victim_nic_pauses_rx": victim["nic_pfc"].get("pauses_rx", 0),
        "incast_data_ok": (all(incast_rx["data_ok"]) and all(s["ok"] for s in incast_senders))
        if incast_rx else None,
        "incast_completion_ns": max((s["completion_ns"] for s in incast_senders), default=0),
        "drops": status["totals"]["drops"], "ecn_marks": status["totals"]["ecn_marks"],
        "pauses_sent": totals.get("pfc_pauses_sent", 0), "pauses_rx": totals.get("pfc_pauses_rx", 0),
        "headroom_drop_pkts": totals.get("pfc_headroom_drop_pkts", 0),
        "incast_priority_pauses_sent": prio_sum("pauses_sent", DSCP_PRIORITY[ROCE_DSCP]),
        "victim_priority_pauses_sent": prio_sum("pauses_sent", victim_prio),
        "victim_priority_pauses_rx": prio_sum("pauses_rx", victim_prio),
        "victim_priority_paused_ns": prio_sum("paused_ns", victim_prio),
        "incast_queue_pauses": queue_pauses(DSCP_PRIORITY[ROCE_DSCP]),
        "victim_queue_pauses": queue_pauses(victim_prio),
        "pauses_sent_by_switch": {sw: sum(r.get("pauses_sent", 0) for r in rows) for sw, rows in prio_rows.items()},
        "headroom_drops_by_switch": {sw: sum(r.get("headroom_drop_pkts", 0) for r in rows)
                                     for sw, rows in prio_rows.items()},
    }


def plot(runs: list[dict[str, Any]], path: str) -> None:
    """The victim's throughput per scenario, one PNG."""
    with plot_figure(path, figsize=(7, 4)) as (_, ax):
        names = [r["scenario"] for r in runs]
        values = [r["victim_throughput_bps"] / 1e6 for r in runs]
        bars = ax.bar(names, values, color=["#4c72b0", "#c44e52", "#dd8452", "#55a868"][:len(runs)])
        for b, r in zip(bars, runs, strict=True):
            ax.annotate(f"{r['pauses_sent']} pauses", (b.get_x() + b.get_width() / 2, b.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("victim throughput (Mb/s, network time)")
        ax.set_title(f"Head-of-line blocking: victim vs {runs[-1]['senders']}->1 incast under PFC, "
                     f"{runs[0]['link_rate_bps'] / 1e6:g} Mb/s links")


def run_bench(args: argparse.Namespace) -> int:
    if args.role != "bench":
        args.link_rate_bps = parse_rate_bps(args.link_rate, what="--link-rate")
        args.size_bytes = parse_size_bytes(args.size, what="--size")
        args.timeout_ns = int(args.timeout * 1e9)
        fn = run_victim_sender if args.role == "victim-sender" else run_victim_receiver
        print(json.dumps(fn(args)))
        return 0
    names = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    bad = [s for s in names if s not in SCENARIOS]
    if bad or not names:
        raise HolBenchError(f"--scenarios {args.scenarios!r}: expected a comma list of {', '.join(SCENARIOS)}")
    if not 1 <= args.senders <= 16:
        raise HolBenchError(f"--senders {args.senders}: must be 1..16")
    if not 0 < args.timeout <= 3600:
        raise HolBenchError(f"--timeout {args.timeout}: allowed (0, 3600] s")
    if os.geteuid() != 0:
        raise HolBenchError("the benchmark builds Mininet fabrics: run it as root")
    cfg = HolConfig(senders=args.senders, incast_bytes=parse_size_bytes(args.incast_size, what="--incast-size"),
                    victim_bytes=parse_size_bytes(args.size, what="--size"),
                    link_rate_bps=parse_rate_bps(args.link_rate, what="--link-rate"),
                    dilation=DEFAULT_DILATION if args.time_dilation is None else args.time_dilation,
                    timeout_s=args.timeout)
    if isinstance(cfg.dilation, AutoDilation):           # calibrated on the benchmark's own topology
        from emu.calibrate import calibrate_dilation
        from emu.fabric import Fabric

        auto = cfg.dilation
        cfg = dataclasses.replace(cfg, dilation=calibrate_dilation(
            lambda c: Fabric(hol_spec(cfg), clock=c), auto, echo=lambda line: print(line, file=sys.stderr)))
    os.environ[ENV_DILATION] = repr(cfg.dilation)        # the switches inherit it
    clock = Clock(cfg.dilation)
    runs = [run_scenario(n, cfg, clock) for n in names]
    if args.plot:
        plot(runs, args.plot)
    fid = combine_fidelity([r["fidelity"] for r in runs])
    if args.json:
        print(json.dumps({"runs": runs, "fidelity": fid}, indent=1))
        return fidelity_exit(fid, args.strict_fidelity)
    for r in runs:
        print(f"{r['scenario']:17s} victim {r['victim_throughput_bps'] / 1e6:7.2f} Mb/s "
              f"({r['victim_completion_ns'] / 1e6:7.1f} ms, bytes ok {r['victim_bytes_ok']}), "
              f"pauses sent {r['pauses_sent']:4d} (victim's priority {r['victim_priority_pauses_sent']}), "
              f"victim NIC paused {r['victim_nic_pauses_rx']}x, drops {r['drops']}, "
              f"incast done in {r['incast_completion_ns'] / 1e6:.1f} ms")
    return fidelity_exit(fid, args.strict_fidelity)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sw.apps.hol_bench", description=__doc__.splitlines()[0])
    p.add_argument("role", nargs="?", choices=("bench", "victim-sender", "victim-receiver"), default="bench",
                   help="bench (default) runs the scenarios; the victim roles run inside the servers")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma list of {', '.join(SCENARIOS)}")
    p.add_argument("--senders", type=int, default=8, help="incast senders (default 8)")
    p.add_argument("--incast-size", default="512KiB", help="bytes each incast sender WRITEs (default 512KiB)")
    p.add_argument("--size", default="256KiB", help="bytes the victim WRITEs (default 256KiB)")
    p.add_argument("--link-rate", default="100M", help="host link rate, network time (default 100M)")
    add_time_dilation_flag(p, flags=("--time-dilation", "--dilation"),
                           unset=f"{DEFAULT_DILATION:g}: eleven Python NICs and three switches share the CPU")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds of network time per run (default 60)")
    p.add_argument("--plot", help="write a PNG of the victim's throughput per scenario here")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_strict_fidelity_flag(p)
    p.add_argument("--cc", default="none", help=argparse.SUPPRESS)
    p.add_argument("--dscp", type=int, default=ROCE_DSCP, help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--dev", help=argparse.SUPPRESS)
    p.add_argument("--gateway-mac", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    from sw.units.cli_guard import call_guarded

    return call_guarded("python -m sw.apps.hol_bench", run_bench, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
