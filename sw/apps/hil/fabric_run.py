"""``starpulse hil run``: the RTL NIC as the live NIC of one host of a P4 fabric, sending to a receiver elsewhere.

The fabric comes up as ``fabric up`` brings it (``emu.fabric.Fabric``, the topology flags); host ``--hil-host`` runs
no software NIC: the bridge testbench (``bridge_tb``) runs in its namespace on its rail-0 interface.  The host driver
(``RtlNicDriver``) writes QP 0's template from the fabric's own addresses (the host's NIC MAC and IP, its leaf's
gateway MAC, the receiver's IP), so the P4 switches route the RTL's frames like any other.  The receiver is the
first host on another leaf (else any other host); on its rail-0 interface ``sw.apps.hil.peer`` judges every frame
(INT the fabric left stripped first, as the software NIC does): ICRC, the pattern payload, PSN order and gaps.

The RTL sends ``duration`` of network time, cc mode none, at a rate that loads every hop to ``RTL_LOAD`` of the
link rate (payload, the 58 bytes of RoCEv2 framing and the INT stack the switches grow).  Goodput is the payload
the receiver accepted over the RTL's sending window (first doorbell to last frame out, in RTL clocks = network
time).  Dilation: given, or from the measured
free-running speed as ``hil bench`` picks it (``time_dilation >= 400e6 / cycles_per_s``, times ``HEADROOM``).
Not yet here (issue 17 items 5/6b/6c): software senders beside the RTL (an incast), CNPs or INT-echo ACKs from the
receiver (``--cc dcqcn|hpcc`` are refused with one line).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from sw.apps.hil.bench import FORMULA, HEADROOM, min_dilation
from sw.apps.hil.launch import BridgeError, bridge_config, free_run, live_in_group, start_bridge
from sw.apps.hil.model import CLK_HZ, CLK_NS, HilSizes, ensure_model
from sw.apps.hil.traffic import configure_qp, flow_of, frame_bytes
from sw.apps.incast_bench import jain
from sw.clock import ENV_DILATION, get_clock, set_clock
from sw.clock.lag import fidelity
from sw.roce.wire.int_md import INT_HOP_BYTES, INT_MD_BYTES, INT_SHIM_BYTES, MAX_INT_HOPS
from sw.units import ROCE_DATA_FRAME_OVERHEAD_BYTES

RTL_LOAD = 0.8            # the busiest hop's load (INT included): below line rate, so cc none drops nothing
FREE_FRAMES = 2000        # frames of the free-running speed measurement that picks the dilation (as hil bench)
TRACE_SAMPLES = 20        # QP_RATE and TX_FRAMES samples over the run (the plot, the rate trace)
QUIET_WALL_S = 20.0       # the receiver gives up after this long (wall) without a frame
RUN_WALL_S = 600.0        # the run's hang guard (wall seconds beyond the paced duration)
CC_RUNNABLE = ("none",)


class HilRunError(RuntimeError):
    """``hil run`` cannot run as asked; the message names the flag or the log."""

    is_user_error = True


def pick_receiver(topo: Any, hil_host: str) -> str:
    """The first host whose rail-0 NIC sits on another leaf than ``hil_host``'s (the path crosses a spine), else
    the first other host."""
    if hil_host not in topo.servers:
        raise HilRunError(f"--hil-host {hil_host}: no such host (hosts s0..s{len(topo.servers) - 1})")
    others = [s for s in topo.servers if s != hil_host]
    if not others:
        raise HilRunError(f"--servers {len(topo.servers)}: hil run needs a second host to receive")
    leaf = topo.nics_of(hil_host)[0].leaf
    return next((s for s in others if topo.nics_of(s)[0].leaf != leaf), others[0])


def payload_rate_bps(link_rate_bps: int, mtu_bytes: int) -> float:
    """The RTL QP's limiter rate (it counts payload bytes) that keeps every hop at <= ``RTL_LOAD`` of the link
    rate, counting the RoCEv2 framing and the INT stack the fabric grows on the way (up to ``MAX_INT_HOPS``)."""
    int_bytes = INT_SHIM_BYTES + INT_MD_BYTES + MAX_INT_HOPS * INT_HOP_BYTES
    return RTL_LOAD * link_rate_bps * mtu_bytes / (mtu_bytes + ROCE_DATA_FRAME_OVERHEAD_BYTES + int_bytes)


def frames_for(duration_ns: int, rate_bps: float, mtu_bytes: int) -> int:
    """MTU frames a QP paced at ``rate_bps`` (payload) sends in ``duration_ns``."""
    return max(1, int(duration_ns * rate_bps / 8e9 / mtu_bytes))


def measured_dilation(workdir: Path, sizes: HilSizes) -> tuple[float, float]:
    """(dilation, free-running cycles/s): ``HEADROOM`` x ``400e6 / cycles_per_s`` of a free-running run."""
    (workdir / "free").mkdir()
    free = free_run(bridge_config(workdir / "free", sizes, ifname=None, free_frames=FREE_FRAMES))
    if not free.get("cycles_per_s"):
        raise BridgeError(f"free-running testbench measured no window; see {workdir / 'free' / 'tb.log'}")
    return float(math.ceil(min_dilation(free["cycles_per_s"]) * HEADROOM)), float(free["cycles_per_s"])


def run_hil(fabric_opts: dict[str, Any], *, hil_host: str, cc: str, duration_ns: int, dilation: float | None,
            workdir: Path | None = None, echo=None) -> dict[str, Any]:
    """Bring the fabric up, run the RTL NIC on ``hil_host`` as a sender to a software receiver, tear everything
    down (also on failure); the ``hil run`` JSON.  ``workdir`` (kept) holds the receiver's capture
    ``receiver.pcap``; without one a temporary directory is used and removed after a good run."""
    from emu.cli import apply_dilation
    from emu.fabric import Fabric
    from emu.net import leftovers
    from emu.reap import owned_tempdir
    from sw.collectives.fabric_topology import Topology

    if cc not in CC_RUNNABLE:
        raise HilRunError(f"--cc {cc}: not runnable yet (the receiver sends no CNPs or INT-echo ACKs; issue 17 "
                          f"items 6b/6c); allowed now: {', '.join(CC_RUNNABLE)}")
    topo = Topology(fabric_opts["spec"])
    receiver = pick_receiver(topo, hil_host)
    if os.geteuid() != 0:
        raise HilRunError("starpulse hil run: needs root (network namespaces and AF_PACKET); run it with sudo")
    sizes = HilSizes()
    ensure_model(sizes, echo=echo)
    own = workdir is None
    work = owned_tempdir("starpulse-hil-") if workdir is None else workdir
    work.mkdir(parents=True, exist_ok=True)
    cps_free = None
    if dilation is None:
        dilation, cps_free = measured_dilation(work, sizes)
        if echo:
            echo(f"hil run: free-running {cps_free:.0f} cycles/s -> time dilation {dilation:g} "
                 f"({FORMULA}, x{HEADROOM})")
    spec = topo.spec
    rate_bps = payload_rate_bps(spec.link_rate_bps, sizes.mtu_bytes)
    n_frames = frames_for(duration_ns, rate_bps, sizes.mtu_bytes)
    src, dst = topo.nics_of(hil_host)[0], topo.nics_of(receiver)[0]
    qpns = flow_of({}, 0)       # the bridge's QP numbers; the addresses are the fabric's (next hop: the leaf)
    flow = {"src_mac": src.mac, "dst_mac": src.gateway_mac, "src_ip": src.ip, "dst_ip": dst.ip,
            "src_qpn": qpns.src_qpn, "dst_qpn": qpns.dst_qpn}
    (work / "loop").mkdir(exist_ok=True)
    cfg = bridge_config(work / "loop", sizes, ifname=src.ifname, rate_bps=spec.link_rate_bps, flow=flow)
    if echo:
        echo(f"hil run: fabric {spec.servers} servers x {spec.gpus_per_server} GPUs, {spec.pods} pods, "
             f"{spec.spines} spines at {spec.link_rate_bps / 1e9:g} Gb/s; RTL NIC on {src.ifname} -> {receiver} "
             f"({dst.ip}): {n_frames} frames over {duration_ns / 1e6:g} ms of network time")
    prev_clock, prev_env = get_clock(), os.environ.get(ENV_DILATION)
    apply_dilation(dilation, None)      # the process's clock and $STARPULSE_TIME_DILATION for switches and bridge
    try:
        with Fabric(**fabric_opts) as fab:
            out = _run_on(fab, cfg, sizes, hil_host, receiver, dst.ifname, n_frames, rate_bps, work)
        # what outlived the run: the fabric's processes, namespaces, interfaces; the bridge's process group
        out["leftovers"] = leftovers(fab.footprint) + [f"hil bridge process {pid}" for pid in
                                                        live_in_group(out.pop("bridge_pgid"))]
    finally:                            # a caller (a test session) keeps its own clock
        set_clock(prev_clock)
        if prev_env is None:
            os.environ.pop(ENV_DILATION, None)
        else:
            os.environ[ENV_DILATION] = prev_env
    out.update({"time_dilation": dilation, "time_dilation_min": round(min_dilation(out["cycles_per_s"]), 1)
                if out["cycles_per_s"] else None, "dilation_formula": FORMULA, "cycles_per_s_free": cps_free,
                "cc": cc, "duration_ns": duration_ns})
    if own:
        shutil.rmtree(work, ignore_errors=True)
        del out["receiver"]["pcap"]
    return out


def _run_on(fab: Any, cfg: dict[str, Any], sizes: HilSizes, hil_host: str, receiver: str, rx_ifname: str,
            n_frames: int, rate_bps: float, work: Path) -> dict[str, Any]:
    """The run on the fabric that is up: bridge on ``hil_host``, QP 0 configured, receiver started, doorbell,
    traced until every frame is out and judged; bridge and receiver stopped also on failure."""
    from sw.roce.softnic.rtl_nic_driver import RtlNicDriver

    clock = get_clock()
    pcap, verdict = work / "receiver.pcap", work / "receiver.json"
    bridge = start_bridge(fab.net.hosts[hil_host], cfg, clock.dilation)
    pgid = bridge.proc.pid
    peer = None
    trace: list[dict[str, Any]] = []
    try:
        port = bridge.wait_ready()
        driver = RtlNicDriver(port)
        share = rate_bps / (int(cfg["data_width"]) * CLK_HZ)
        asyncio.run(configure_qp(driver, 0, cfg, rate_share=share))
        rate_reg = asyncio.run(driver.qp_rate(0))
        peer = fab.net.hosts[receiver].popen(
            [sys.executable, "-m", "sw.apps.hil.peer", "recv", "--ifname", rx_ifname, "--frames", str(n_frames),
             "--pcap", str(pcap), "--json", str(verdict), "--timeout-s", str(QUIET_WALL_S)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if peer.stdout is None or peer.stdout.readline().strip() != "ready":
            raise HilRunError(f"hil run: the receiver on {receiver} did not start")

        async def send_and_trace() -> dict[str, int]:
            step_ns = max(1, int(n_frames * (sizes.mtu_bytes * 8e9 / rate_bps) / TRACE_SAMPLES))
            deadline_ns = clock.now_ns() + step_ns * TRACE_SAMPLES * 4 + int(clock.net_duration_ns(RUN_WALL_S * 1e9))
            for n in frame_bytes(n_frames, sizes.mtu_bytes):
                await driver.ring(0, n)
            while True:
                stats = port.stats()
                trace.append({"rtl_ns": stats["rtl_ns"], "frames_tx": stats["frames_tx"],
                              "qp_rate": await driver.qp_rate(0)})
                if stats["frames_tx"] >= n_frames:
                    break
                if clock.now_ns() > deadline_ns:
                    raise HilRunError(f"hil run: the RTL sent {stats['frames_tx']}/{n_frames} frames before the "
                                      f"hang guard; see {bridge.log}")
                clock.sleep_ns(step_ns)
            return await driver.counters(("TX_FRAMES", "CNP_RECEIVED", "INT_ACKS", "RX_ICRC_ERRORS"))

        counters = asyncio.run(send_and_trace())
        try:
            peer.wait(timeout=QUIET_WALL_S * 3 + clock.wall_duration_ns(1e6) / 1e9)
        except subprocess.TimeoutExpired:
            raise HilRunError(f"hil run: the receiver on {receiver} did not finish") from None
        figures = bridge.finish(port)
    finally:
        bridge.kill()
        if peer is not None and peer.poll() is None:
            peer.kill()
            peer.wait(timeout=10)
    if not verdict.exists():
        raise HilRunError(f"hil run: the receiver on {receiver} wrote no verdict (exit {peer.returncode})")
    judged = json.loads(verdict.read_text())
    status = fab.status()
    lag = fab.lag()         # the switches', the bridge's (its lag file) and this process's components
    window_ns = figures["window_cycles"] * CLK_NS
    goodput = judged["payload_ok"] * sizes.mtu_bytes * 8e9 / window_ns if window_ns else None
    cps = figures.get("cycles_per_s")
    return {
        "senders": [{"name": hil_host, "kind": "rtl", "goodput_bps": round(goodput) if goodput is not None else None}],
        "jain": round(jain([goodput]), 6) if goodput else None,
        "receiver": {"name": receiver, **judged, "gaps": judged["frames"] - judged["psn_in_order"],
                     "pcap": str(pcap)},
        "drops": max(0, counters["TX_FRAMES"] - judged["frames"]),
        "fabric_drops": status["totals"]["drops"],
        "rtl": {"frames_tx": counters["TX_FRAMES"], "cnp_received": counters["CNP_RECEIVED"],
                "int_acks": counters["INT_ACKS"], "rx_icrc_errors": counters["RX_ICRC_ERRORS"],
                "rate_bps": round(rate_bps), "qp_rate_reg": rate_reg,
                # cc none: the golden model (sw.cc.NoCc) holds the rate the host set; every sample must show it
                "rate_trace_matches_model": all(s["qp_rate"] == rate_reg for s in trace),
                "rate_trace": trace},
        "frames": n_frames,
        "bridge_pgid": pgid,
        "cycles_per_s": cps,
        "bridge": {k: figures[k] for k in ("cycles", "rtl_ns", "net_ns", "slept_s", "frames_tx", "frames_rx",
                                           "window_cycles", "busy_wall_s")},
        "fidelity": fidelity(lag, clock.dilation),
        "fidelity_components": sorted(lag),
    }


def plot(out: dict[str, Any], path: str) -> None:
    """The RTL sender's throughput over network time (TX_FRAMES between samples) and its QP_RATE (as Gb/s)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trace = out["rtl"]["rate_trace"]
    frame_bits = (HilSizes().mtu_bytes + ROCE_DATA_FRAME_OVERHEAD_BYTES) * 8
    t_ms, tput, rate = [], [], []
    for a, b in zip(trace, trace[1:], strict=False):
        if b["rtl_ns"] > a["rtl_ns"]:
            t_ms.append(b["rtl_ns"] / 1e6)
            tput.append((b["frames_tx"] - a["frames_tx"]) * frame_bits / (b["rtl_ns"] - a["rtl_ns"]))
            payload_bps = b["qp_rate"] * 8 * CLK_HZ / (1 << 24)     # the limiter counts payload bytes
            rate.append(payload_bps * frame_bits / (HilSizes().mtu_bytes * 8) / 1e9)
    fig, ax = plt.subplots(figsize=(7, 4))
    name = out["senders"][0]["name"]
    ax.plot(t_ms, tput, "-o", label=f"{name} (RTL) sent, wire Gb/s")
    ax.plot(t_ms, rate, "--", label=f"{name} QP_RATE, wire Gb/s")
    ax.set_xlabel("network time (ms)")
    ax.set_ylabel("Gb/s")
    ax.set_title(f"hil run, cc {out['cc']}, dilation {out['time_dilation']:g}, fidelity ok={out['fidelity']['ok']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
