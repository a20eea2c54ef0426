"""8 -> 1 incast of RDMA WRITEs through the P4 fabric: `python -m sw.apps.incast_bench --cc dcqcn,hpcc,none --json`.

The benchmark brings up a one-leaf fabric (``servers = senders + 1``, one NIC each, rail-local paths, so the
leaf's port toward the receiver is the only bottleneck), starts one receiver and N sender processes inside the
servers' namespaces (the same module's ``receiver``/``sender`` roles), lets every sender RDMA WRITE ``--size``
bytes at once, and reports per run: switch drops, bottleneck utilization, the queue's high-water mark
(``max_queue_pkts``) and its time-weighted depth p50/p99 (``queue_p50_pkts``/``queue_p99_pkts``: network time from
the bottleneck's first to last depth change; a late tail of events sets the peak, not these), Jain
fairness and each flow's completion time — as JSON, and as a PNG with ``--plot``.
Defaults model a datacenter ToR, because DCQCN's and HPCC's literature parameters (µs timers, KB thresholds)
assume one: 10 Gb/s links in network time at a time dilation of 10000 (1 Mb/s of wall rate per link).  The
dilation is what keeps the control loop honest: the Python NICs and switch of a loaded 2-core host add up to tens
of ms of wall latency, which at dilation 1000 is 100-200 µs of network time (measured: CNPs arrived 225 µs after
the receiver sent them) — four DCQCN timer periods — while at 10000 it is ~1 µs.  The bottleneck's buffer is 2 MB
(``--buffer``; a shallow-buffer 10/40G ToR shares 9-16 MB among its ports, and a congested port may take a few MB
of it), not the switch's 64-packet default that no CC can keep an 8 x line-rate start out of.  RED/ECN thresholds
in packets of the path MTU (1 KiB here): Kmin 5 (~5 KB, DCQCN's Kmin), Kmax 45 (~50 KB: DCQCN's 200 KB at 40G
scaled to 10G, the same 40 µs of queue), Pmax 1 %, judged by fabric.p4 on the queue's depth at dequeue (as
DCTCP-style switches and the HPCC authors' ns-3 switch do: marks on the enqueue depth lag the queue by its delay).
Host DCQCN parameters: sw.roce.softnic.qp_pacer.  ``--pfc on`` turns on 802.1Qbb in the leaf (per ingress port
XOFF/XON/headroom) and in the NICs, and reports the pauses the leaf sent.

Each run also reports the DCQCN chain, to find where a loop breaks: CE marks the leaf set (``ecn_marks``), CE
packets the receiver's NP saw (``ce_packets_rx``), CNPs it sent (``cnps``), CNPs each sender received and its
reaction point applied (``cnps_received``/``cnps_applied``); ``--trace`` adds every flow's rate trajectory, and
``cc_params`` the parameters the senders' model ran with.  ``lag_components`` gives the figures behind
``fidelity``: every component's lateness (``sw.clock.lag``: switches, link emulators, each NIC's pacer, receive
path and congestion-feedback reaction).

Figures are in network time (``sw.clock``: run with time dilation, ``--dilation``, so the Python data path and
the software switch keep up).  Utilization = bytes the bottleneck port sent (switch counter, frames with their
headers, less the INT hop the leaf adds after its shaper) / (link rate x the incast's span: first flow's start
to last flow's end); ``goodput_utilization`` counts payload only.  Flows start on one "go" key in the rendezvous
store; a flow's completion time runs from its sender seeing it to the WRITE's completion.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from sw.clock import ENV_DILATION, Clock, get_clock, set_clock
from sw.clock.lag import (
    add_strict_fidelity_flag,
    combine_fidelity,
    component_summaries,
    fidelity,
    fidelity_exit,
)
from sw.roce.softnic.qp_pacer import CC_NAMES, DCQCN_CNP_INTERVAL_NS, make_cc
from sw.roce.transport.qp_connect import connect, qp_info
from sw.roce.transport.rules import PATH_MTUS
from sw.roce.transport.verbs import SendWr, WcStatus, WrOpcode
from sw.units import (
    ROCE_DATA_FRAME_OVERHEAD_BYTES,
    AutoDilation,
    add_time_dilation_flag,
    parse_duration_ns,
    parse_rate_bps,
    parse_size_bytes,
)
from sw.units.file_store import FileStore
from sw.units.plot import plot_figure

INT_ONE_HOP_BYTES = 4 + 12 + 28  # shim, MD header, one hop record
DEFAULT_DILATION = 10000.0
MAX_WALL_WAIT_S = 86_400.0  # select()'s limit is ~24 days: a long network timeout x a large dilation exceeds it
GO_POLL_WALL_NS = 200_000  # how often (wall time) a sender looks for the start signal: the flows' start skew
# Rendezvous and end-of-run polls are bounded in wall time: in network time they would be 10 s of wall per 1 ms
# poll at dilation 10000.
STORE_POLL_WALL_NS = 5_000_000


class IncastError(RuntimeError):
    """Bad incast options or a run that could not finish: one line, exit 2."""

    is_user_error = True


def shared_now_ns(dilation: float) -> int:
    """Network time on CLOCK_MONOTONIC, which every namespace of this host shares: stamps of different
    processes compare (sw.clock's origin is per process), so the incast's span is last end - first start."""
    return int(time.monotonic_ns() / dilation)


def _pattern(index: int, size: int) -> np.ndarray:
    """Sender ``index``'s payload: reproducible, so the receiver verifies it without a copy."""
    return np.random.default_rng(index + 1).integers(0, 256, size, dtype=np.uint8)


def _open(args: argparse.Namespace):
    from sw.roce.softnic.port import device_path_mtu, open_device

    opts = {} if args.pacer_burst_bytes is None else {"pacer_burst_bytes": args.pacer_burst_bytes}
    nic = open_device(args.dev, line_rate_bps=parse_rate_bps(args.link_rate, what="--link-rate"), cc=args.cc,
                      base_rtt_ns=parse_duration_ns(args.base_rtt, what="--base-rtt"), **opts)
    return nic, device_path_mtu(args.dev, nic.ip, args.path_mtu, flag="--path-mtu")


def run_receiver(args: argparse.Namespace) -> dict[str, Any]:
    """One QP and one buffer slice per sender; ACK (and echo INT) until every sender reported, then verify."""
    nic, mtu = _open(args)
    store, clock = FileStore(args.store), nic.clock
    size, n = args.size_bytes, args.senders
    pd, cq = nic.alloc_pd(), nic.create_cq()
    buf = np.zeros(size * n, np.uint8)
    mr = pd.reg_mr(buf)
    qps = []
    for i in range(n):
        qp = nic.create_qp(pd, cq)
        store.set(f"rx{i}", qp_info(qp, 0, mr) | {"offset": i * size})
        qps.append(qp)
    deadline = clock.now_ns() + args.timeout_ns
    for i, qp in enumerate(qps):
        peer = store.wait(f"tx{i}", max(1, deadline - clock.now_ns()), poll_ns=_wall_poll_ns(clock))
        connect(qp, 0, peer | {"mac": args.gateway_mac}, path_mtu=mtu, timeout=args.qp_timeout)
    store.set("rx_ready", True)
    done = lambda: all(store.get(f"res{i}") is not None for i in range(n))  # noqa: E731
    finished = _run_until(nic, done, deadline)
    data_ok = [bool(np.array_equal(buf[i * size:(i + 1) * size], _pattern(i, size))) for i in range(n)]
    report = {"role": "receiver", "ip": str(nic.ip), "finished": finished, "data_ok": data_ok,
              "cnps_sent": nic.counters.cnps_sent, "ce_packets": nic.np.ce_packets,
              "int_frames": nic.counters.int_frames,
              "int_echoes_sent": sum(qp.resp.int_echoes_sent for qp in qps if qp.resp is not None),
              "counters": nic.qp_counters()}
    store.set("rx_result", report)
    return report


def _wall_poll_ns(clock: Clock) -> int:
    """STORE_POLL_WALL_NS of wall time in network ns."""
    return max(1, int(clock.net_duration_ns(STORE_POLL_WALL_NS)))


def _run_until(nic: Any, done: Any, deadline_ns: int) -> bool:
    """Drive ``nic`` until ``done()`` or the network-time deadline, never idling longer than a wall poll, so a
    file-store key that ``done()`` watches is seen within STORE_POLL_WALL_NS even when no frame arrives."""
    clock = nic.clock
    wait_ns = _wall_poll_ns(clock)
    while not done():
        if clock.now_ns() >= deadline_ns:
            return done()
        nic.poll(wait_ns)
    return True


def run_sender(args: argparse.Namespace) -> dict[str, Any]:
    """Connect to the receiver, wait for "go", WRITE ``--size`` bytes, report the completion time."""
    nic, mtu = _open(args)
    store, clock = FileStore(args.store), nic.clock
    i, size = args.index, args.size_bytes
    pd, cq = nic.alloc_pd(), nic.create_cq()
    src = _pattern(i, size)
    mr = pd.reg_mr(src)
    qp = nic.create_qp(pd, cq)
    store.set(f"tx{i}", qp_info(qp, 0))
    deadline = clock.now_ns() + args.timeout_ns
    peer = store.wait(f"rx{i}", args.timeout_ns, poll_ns=_wall_poll_ns(clock))
    connect(qp, 0, peer | {"mac": args.gateway_mac}, path_mtu=mtu, timeout=args.qp_timeout)
    store.set(f"ready{i}", True)
    poll_ns = max(1, int(clock.net_duration_ns(GO_POLL_WALL_NS)))
    while store.get("go") is None and clock.now_ns() < deadline:
        nic.poll(poll_ns)
    start_ns, start_shared_ns = clock.now_ns(), shared_now_ns(clock.dilation)
    qp.post_send(SendWr(i, WrOpcode.RDMA_WRITE, mr.sge(), remote_addr=int(peer["addr"]) + int(peer["offset"]),
                        rkey=int(peer["rkey"])))
    wcs: list = []
    trace: list[tuple[int, int]] = []  # (ns since start, rate_bps) at every rate change the engine saw

    def completed() -> bool:
        rate = qp.pacer.rate_bps if qp.pacer else 0
        if not trace or trace[-1][1] != rate:
            trace.append((clock.now_ns() - start_ns, rate))
        wcs.extend(cq.poll())
        return bool(wcs)

    finished = _run_until(nic, completed, deadline)
    end_ns, end_shared_ns = clock.now_ns(), shared_now_ns(clock.dilation)
    pacer = qp.pacer
    report = {"role": "sender", "index": i, "finished": finished,
              "status": wcs[0].status.name if wcs else "TIMEOUT",
              "ok": bool(wcs) and wcs[0].status == WcStatus.SUCCESS,
              "completion_ns": end_ns - start_ns, "bytes": size,
              "start_shared_ns": start_shared_ns, "end_shared_ns": end_shared_ns,
              "retransmissions": qp.counters.retransmitted_packets, "timeouts": qp.counters.timeouts,
              "cnps_received": qp.counters.cnps_received,
              "cnps_applied": getattr(pacer.cc, "cnps", 0) if pacer else 0,
              "rate_trace": trace,
              "int_echoes": pacer.int_echoes if pacer else 0,
              "final_rate_bps": pacer.rate_bps if pacer else 0,
              "cc_updates": getattr(pacer.cc, "updates", None) if pacer else None}
    # Keep answering (ACKs of a late retransmission) until the receiver is done with everyone.
    store.set(f"res{i}", report)
    _run_until(nic, lambda: store.get("rx_result") is not None, deadline)
    return report


def queue_depth_pkts(buffer_bytes: int, if_mtu: int) -> int:
    """The bottleneck queue in packets that holds ``buffer_bytes`` of full RoCE frames of the path MTU."""
    from sw.roce.softnic.port import path_mtu_for

    return max(1, buffer_bytes // (path_mtu_for(if_mtu) + ROCE_DATA_FRAME_OVERHEAD_BYTES))


def jain(values: list[float]) -> float:
    """Jain's fairness index of ``values`` (1 = all equal, 1/n = one takes all)."""
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values)) if values and any(values) else 0.0


def cc_params(cc: str, link_rate_bps: int, base_rtt_ns: int) -> dict[str, Any]:
    """The parameters the senders' congestion control runs with (sw.roce.softnic.qp_pacer's host choice), for the
    report; DCQCN's include the receiver NP's CNP spacing."""
    params = getattr(make_cc(cc, link_rate_bps, base_rtt_ns=base_rtt_ns), "params", None)
    out = dataclasses.asdict(params) if params is not None else {}
    if cc == "dcqcn":
        out["np_cnp_interval_ns"] = DCQCN_CNP_INTERVAL_NS
    return out


def incast_spec(args: argparse.Namespace) -> Any:
    """The incast's fabric: one server per sender plus the receiver's, one leaf, links at ``--link-rate``."""
    from sw.collectives.fabric_topology import TopologySpec

    return TopologySpec(servers=args.senders + 1, gpus_per_server=1, spines=0,
                        link_rate_bps=parse_rate_bps(args.link_rate, what="--link-rate"))


def run_incast(cc: str, args: argparse.Namespace, clock: Clock | None = None) -> dict[str, Any]:
    """One incast through a fresh fabric with congestion control ``cc``; the JSON report of the run.

    The switches take their dilation from ``$STARPULSE_TIME_DILATION``: keep it equal to ``clock``'s."""
    import subprocess

    from emu.control_plane import EcnConfig
    from emu.fabric import Fabric, PfcSettings
    from emu.traffic import stop_proc
    from sw.roce.softnic.port import ENV_NIC_IPV6, ENV_NIC_PFC

    clock = clock or get_clock()
    rate = parse_rate_bps(args.link_rate, what="--link-rate")
    spec = incast_spec(args)
    pfc = PfcSettings(True, args.pfc_xoff_bytes, args.pfc_xon_bytes, args.pfc_headroom_bytes) if args.pfc == "on" \
        else PfcSettings()
    fab = Fabric(spec, ecn=EcnConfig(args.ecn_kmin, args.ecn_kmax, args.ecn_pmax), clock=clock, pfc=pfc)
    with fab, tempfile.TemporaryDirectory(prefix="starpulse-incast-") as store_dir:
        topo = fab.topo
        servers = topo.servers
        rx_nic = topo.nics_of(servers[-1])[0]
        leaf = rx_nic.leaf
        store = FileStore(store_dir)
        common = ["--store", store_dir, "--size", str(args.size_bytes), "--senders", str(args.senders), "--cc", cc,
                  "--link-rate", str(rate), "--base-rtt", args.base_rtt, "--timeout", str(args.timeout),
                  "--qp-timeout", str(args.qp_timeout),
                  *(["--pacer-burst", str(args.pacer_burst_bytes)] if args.pacer_burst_bytes is not None else []),
                  *(["--path-mtu", str(args.path_mtu)] if args.path_mtu is not None else [])]
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]),
                   **{ENV_DILATION: repr(clock.dilation)})
        if pfc.enabled:
            env[ENV_NIC_PFC] = "0"      # the NICs honour pauses of priority 0, the one RoCE uses here
        else:
            env.pop(ENV_NIC_PFC, None)
        if args.ipv6:
            env[ENV_NIC_IPV6] = "fabric"  # every NIC on its IPv4 address in the fabric's IPv6 plan (sw.roce.wire.gid)
        else:
            env.pop(ENV_NIC_IPV6, None)
        me = [sys.executable, "-m", "sw.apps.incast_bench"]
        procs = []
        try:
            for k, server in enumerate(servers):
                nic = topo.nics_of(server)[0]
                role = ["receiver"] if k == len(servers) - 1 else ["sender", "--index", str(k)]
                procs.append(fab.net.hosts[server].popen(
                    [*me, *role, "--dev", nic.ifname, "--gateway-mac", nic.gateway_mac, *common], env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            fab.helper_procs.extend(procs)
            end_ns = clock.now_ns() + int(args.timeout * 1e9)
            keys = ["rx_ready", *(f"ready{i}" for i in range(args.senders))]
            while not all(store.get(k) for k in keys):
                _check_alive(procs)
                if clock.now_ns() > end_ns:
                    raise IncastError("incast: the roles did not connect in time")
                clock.sleep_ns(_wall_poll_ns(clock))
            queue_depth = args.queue_depth or queue_depth_pkts(args.buffer_bytes, spec.mtu)
            fab.switch_cli(leaf, f"set_queue_depth {queue_depth} {rx_nic.leaf_port}")
            fab.switch_cli(leaf, "port_stats_reset")
            marks_before = _ecn_marks(fab, leaf, rx_nic.leaf_port)
            store.set("go", True)
            wall_timeout_s = min(args.timeout * clock.dilation + 60, MAX_WALL_WAIT_S)
            outs = [p.communicate(timeout=wall_timeout_s) for p in procs]
            stats = fab.port_counters(leaf)
            ecn_marks = _ecn_marks(fab, leaf, rx_nic.leaf_port) - marks_before
            lag = fab.lag()           # the switches since port_stats_reset, the roles' NICs, emulators
            fid = fidelity(lag, fab.clock.dilation)
        finally:
            for p in procs:
                stop_proc(p)
    results = []
    for p, (out, err) in zip(procs, outs, strict=True):
        lines = [ln for ln in out.splitlines() if ln.startswith("{")]
        if p.returncode != 0 or not lines:
            raise IncastError(f"incast role failed (exit {p.returncode}): {err.strip().splitlines()[-1:] or out}")
        results.append(json.loads(lines[-1]))
    rx, senders = results[-1], results[:-1]
    port = stats[rx_nic.leaf_port]
    times = [s["completion_ns"] for s in senders]
    span_ns = max(s["end_shared_ns"] for s in senders) - min(s["start_shared_ns"] for s in senders)
    # Frames as the senders sent them: the leaf adds one INT hop (shim + MD + hop) after its shaper.
    sent_bytes = port["tx_bytes"] - port["tx_pkts"] * INT_ONE_HOP_BYTES
    drops = sum(v.get("queue_drop_pkts", 0) + v.get("pipeline_drop_pkts", 0) for v in stats.values())
    # frames the kernel dropped before the switch process read them: the emulator fell behind (not the fabric)
    kernel_drops = sum(v.get("rx_kernel_drops", 0) for v in stats.values())
    headroom_drops = sum(v.get("pfc_headroom_drop_pkts", 0) for v in stats.values())
    return {
        "cc": cc, "senders": args.senders, "bytes_per_flow": args.size_bytes, "link_rate_bps": rate,
        "time_dilation": clock.dilation, "ip_version": 6 if args.ipv6 else 4, "base_rtt": args.base_rtt,
        "receiver_ip": rx["ip"], "queue_depth_pkts": queue_depth,
        "ecn_kmin_kmax_pmax": [args.ecn_kmin, args.ecn_kmax, args.ecn_pmax],
        "cc_params": cc_params(cc, rate, parse_duration_ns(args.base_rtt, what="--base-rtt")),
        "data_ok": all(rx["data_ok"]) and all(s["ok"] for s in senders),
        "drops": drops + headroom_drops, "switch_rx_kernel_drops": kernel_drops,
        "pfc": args.pfc,
        "pfc_xoff_xon_headroom_bytes": [args.pfc_xoff_bytes, args.pfc_xon_bytes, args.pfc_headroom_bytes],
        "pfc_pauses_sent": sum(v.get("pfc_pauses_sent", 0) for v in stats.values()),
        "pfc_xoff_events": sum(v.get("pfc_xoff_events", 0) for v in stats.values()),
        "pfc_headroom_drop_pkts": headroom_drops,
        "bottleneck_tx_bytes": port["tx_bytes"], "bottleneck_tx_pkts": port["tx_pkts"], "span_ns": span_ns,
        "utilization": sent_bytes * 8e9 / span_ns / rate,
        "goodput_utilization": args.senders * args.size_bytes * 8e9 / span_ns / rate,
        "goodput_bps": args.senders * args.size_bytes * 8e9 / span_ns,
        "max_queue_pkts": port["high_water_pkts"],
        "queue_p50_pkts": port["queue_p50_pkts"], "queue_p99_pkts": port["queue_p99_pkts"],
        "jain": jain([s["bytes"] * 8e9 / t for s, t in zip(senders, times, strict=True)]),
        "completion_ns": times,
        "retransmissions": sum(s["retransmissions"] for s in senders),
        "timeouts": sum(s["timeouts"] for s in senders),
        "ecn_marks": ecn_marks, "ce_packets_rx": rx["ce_packets"], "cnps": rx["cnps_sent"],
        "cnps_received": [s["cnps_received"] for s in senders], "cnps_applied": [s["cnps_applied"] for s in senders],
        "int_echoes": sum(s["int_echoes"] for s in senders),
        "final_rate_bps": [s["final_rate_bps"] for s in senders], "fidelity": fid,
        "lag_components": component_summaries(lag),
    } | ({"rate_traces": [s["rate_trace"] for s in senders]} if args.trace else {})


def _ecn_marks(fab: Any, switch: str, port: int) -> int:
    """The P4 program's ECN-mark counter of one egress port (packets)."""
    m = re.search(r"packets=(\d+)", fab.switch_cli(switch, f"counter_read FabricEgress.ecn_marks {port}"))
    return int(m.group(1)) if m else 0


def _check_alive(procs: list) -> None:
    for p in procs:
        if p.poll() is not None:
            err = p.stderr.read() if p.stderr else ""
            raise IncastError(f"incast role exited early ({p.returncode}): {err.strip().splitlines()[-1:]}")


def plot(runs: list[dict[str, Any]], path: str) -> None:
    """Completion time per flow and each run's utilization/fairness, one PNG."""
    with plot_figure(path, figsize=(7, 4)) as (_, ax):
        width = 0.8 / max(1, len(runs))
        for k, r in enumerate(runs):
            xs = [i + k * width for i in range(len(r["completion_ns"]))]
            ax.bar(xs, [t / 1e6 for t in r["completion_ns"]], width,
                   label=f"{r['cc']}: goodput {r['goodput_utilization']:.2f} (wire {r['utilization']:.2f}) of the link,"
                         f" Jain {r['jain']:.3f}, drops {r['drops']}, max queue {r['max_queue_pkts']} pkts")
        ax.set_xlabel("flow (sender)")
        ax.set_ylabel("completion time (ms, network time)")
        ax.set_title(f"{runs[0]['senders']}->1 RDMA WRITE incast, {runs[0]['link_rate_bps'] / 1e6:g} Mb/s links")
        ax.legend(fontsize=8)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m sw.apps.incast_bench", description=__doc__.splitlines()[0])
    p.add_argument("role", nargs="?", choices=("bench", "receiver", "sender"), default="bench",
                   help="bench (default) runs everything; receiver/sender are the in-namespace roles")
    p.add_argument("--cc", default="dcqcn,hpcc,none", help="comma list of none|dcqcn|hpcc (default all three)")
    p.add_argument("--senders", type=int, default=8, help="senders (default 8)")
    p.add_argument("--size", default="1MiB", help="bytes each sender WRITEs (default 1MiB)")
    p.add_argument("--link-rate", default="10G", help="fabric link rate, network time (default 10G)")
    p.add_argument("--base-rtt", default="4us", help="HPCC's T, network time (default 4us)")
    add_time_dilation_flag(p, flags=("--time-dilation", "--dilation"),
                           unset=f"${ENV_DILATION}, else {DEFAULT_DILATION:g}")
    p.add_argument("--ecn-kmin", type=int, default=5, help="RED/ECN kmin in packets (default 5)")
    p.add_argument("--ecn-kmax", type=int, default=45, help="RED/ECN kmax in packets (default 45)")
    p.add_argument("--ecn-pmax", type=float, default=0.01, help="RED/ECN marking probability at kmax (default 0.01)")
    p.add_argument("--buffer", default="2MB", help="bottleneck buffer in bytes of full frames (default 2MB)")
    p.add_argument("--queue-depth", type=int, help="bottleneck queue depth in packets (default: from --buffer)")
    p.add_argument("--pfc", choices=("on", "off"), default="off", help="priority flow control in the fabric and "
                   "the NICs (default off)")
    p.add_argument("--pfc-xoff", default="32K", help="PFC XOFF per ingress port in bytes (default 32K)")
    p.add_argument("--pfc-xon", default="16K", help="PFC XON per ingress port in bytes (default 16K)")
    p.add_argument("--pfc-headroom", default="64K", help="PFC headroom per ingress port in bytes (default 64K)")
    p.add_argument("--ipv6", action="store_true", help="RoCEv2 over IPv6 (the fabric's IPv6 plan) instead of IPv4")
    p.add_argument("--pacer-burst", help="each QP's token-bucket depth in bytes (default: the NIC's)")
    p.add_argument("--path-mtu", type=int, choices=PATH_MTUS,
                   help="every QP's RoCE path MTU (default: the largest the interfaces carry)")
    p.add_argument("--qp-timeout", type=int, default=10,
                   help="QP ACK timeout exponent (default 10: 4.2 ms, beyond a full 2 MB queue at 10G)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds of network time per run (default 300)")
    p.add_argument("--plot", help="write a PNG of the runs here")
    p.add_argument("--trace", action="store_true",
                   help="add each flow's rate trajectory to the JSON ([ns since its start, rate_bps] per change)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_strict_fidelity_flag(p)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--dev", help=argparse.SUPPRESS)
    p.add_argument("--gateway-mac", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The options with sizes and times parsed (``size_bytes``, ``timeout_ns``); IncastError when bad."""
    args = build_parser().parse_args(argv)
    args.size_bytes = parse_size_bytes(args.size, what="--size")
    args.buffer_bytes = parse_size_bytes(args.buffer, what="--buffer")
    args.pfc_xoff_bytes = parse_size_bytes(args.pfc_xoff, what="--pfc-xoff")
    args.pfc_xon_bytes = parse_size_bytes(args.pfc_xon, what="--pfc-xon")
    args.pfc_headroom_bytes = parse_size_bytes(args.pfc_headroom, what="--pfc-headroom")
    args.pacer_burst_bytes = None if args.pacer_burst is None else parse_size_bytes(args.pacer_burst,
                                                                                      what="--pacer-burst")
    args.timeout_ns = int(args.timeout * 1e9)
    if not 1 <= args.senders <= 16:
        raise IncastError(f"--senders {args.senders}: must be 1..16")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        if args.role != "bench":
            report = run_receiver(args) if args.role == "receiver" else run_sender(args)
            print(json.dumps(report))
            return 0
        names = [c.strip() for c in args.cc.split(",") if c.strip()]
        bad = [c for c in names if c not in CC_NAMES]
        if bad or not names:
            raise IncastError(f"--cc {args.cc!r}: expected a comma list of {', '.join(CC_NAMES)}")
        if os.geteuid() != 0:
            raise IncastError("incast builds a Mininet fabric: run it as root")
        if isinstance(args.time_dilation, AutoDilation):      # calibrated on the incast's own topology
            from emu.calibrate import calibrate_dilation
            from emu.fabric import Fabric

            k = calibrate_dilation(lambda c: Fabric(incast_spec(args), clock=c), args.time_dilation,
                                   echo=lambda line: print(line, file=sys.stderr, flush=True))
            os.environ[ENV_DILATION] = repr(k)
            set_clock(Clock(k))
        elif args.time_dilation is not None or ENV_DILATION not in os.environ:
            # not given: $STARPULSE_TIME_DILATION, else DEFAULT_DILATION (the CC loops' honest choice, module doc)
            os.environ[ENV_DILATION] = repr(float(args.time_dilation or DEFAULT_DILATION))
        runs = [run_incast(cc, args) for cc in names]
    except Exception as exc:  # user errors print one line
        if not getattr(exc, "is_user_error", False):
            raise
        print(f"incast: error: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        plot(runs, args.plot)
    fid = combine_fidelity([r["fidelity"] for r in runs])
    if args.json:
        print(json.dumps({"runs": runs, "fidelity": fid}, indent=1))
    else:
        for r in runs:
            print(f"{r['cc']:6s} drops {r['drops']:5d}  util {r['utilization']:.3f}"
                  f"  goodput {r['goodput_utilization']:.3f}  maxq {r['max_queue_pkts']:3d} pkts"
                  f" (p99 {r['queue_p99_pkts']}, p50 {r['queue_p50_pkts']})"
                  f"  Jain {r['jain']:.4f}  data_ok {r['data_ok']}")
    return (0 if all(r["data_ok"] for r in runs) else 1) or fidelity_exit(fid, args.strict_fidelity)


if __name__ == "__main__":
    sys.exit(main())
