"""``starpulse hil run``: the RTL NIC as the live NIC of one host of a P4 fabric, sending to a receiver elsewhere.

The fabric comes up as ``fabric up`` brings it (``emu.fabric.Fabric``, the topology flags); host ``--hil-host`` runs
no software NIC: the bridge testbench (``bridge_tb``) runs in its namespace on its rail-0 interface.  The host driver
(``RtlNicDriver``) writes QP 0's template from the fabric's own addresses (the host's NIC MAC and IP, its leaf's
gateway MAC, the receiver's IP), so the P4 switches route the RTL's frames like any other.  The receiver is the
first host on another leaf (else any other host); on its rail-0 interface ``sw.apps.hil.peer`` judges every frame
(INT the fabric left stripped first, as the software NIC does): ICRC, the pattern payload, PSN order and gaps.

An incast: every host but the RTL's and the receiver sends to the receiver too, with the software NIC (``sw.roce``,
the roles of ``sw.apps.incast_bench``: one RDMA WRITE each, the same congestion control as the RTL), all starting on
one "go".  Every sender moves the same payload (the RTL's frames, each software WRITE): what ``duration`` carries in
MTU frames at the receiver link's payload rate over the number of senders.  The software senders' QPs take the RTL's
RoCE MTU as their path MTU, so every sender's frames are alike (DCQCN marks per packet).  The RTL's limiter charges
each frame's wire bytes (``sw.cc.nic_regs.TX_WIRE_OVERHEAD_BYTES`` beyond the payload), as the software NIC's pacer
does: its rates are wire rates.  With ``--cc none`` it holds a rate that loads every hop to ``RTL_LOAD`` of the link
rate (payload, the 58 bytes of RoCEv2 framing, the Ethernet overhead and the INT stack the switches grow).  With
``--cc dcqcn`` the host driver writes the software NIC's DCQCN parameters (``sw.roce.softnic.qp_pacer.make_cc``,
line rate = link rate) and QP_INIT in cc_mode dcqcn: at its line rate the RTL fills its link, and the INT stack its
leaf adds puts the uplink above its rate, so the RTL congests its first hop by itself; the receiver's ``peer`` is
its notification point (``sw.cc.DcqcnNp`` with the software NIC's CNP spacing, ``qp_pacer.make_np``): CNPs cross the
fabric back to the RTL's ``rx_s_axis``.  The leaves then sink INT toward the hosts (``--int-sink report``): the
RTL's parser finds a CNP's BTH only right after UDP.  The bridge records each CNP's arrival clock and every QP_RATE
read; ``rate_replay`` feeds the arrivals to ``sw.cc.DcqcnRp`` with the parameters read back from the NIC and
compares every read bit for bit (``rtl.rate_trace_matches_model``).  With ``--cc hpcc`` the driver writes the
software NIC's HPCC parameters (``make_cc("hpcc", link rate, base_rtt_ns=HPCC_BASE_RTT_NS)``, the software senders
get the same T), the INT queue unit (an MTU frame, as the host stack counts it) and QP_INIT in cc_mode hpcc; the
leaves leave the INT stack to the hosts (``--int-sink host``); the receiver's ``peer`` answers every RTL frame with
an RC ACK echoing the frame's INT hops (as HPCC assumes: one ACK per packet), but none sooner after the last than
twice the time the RTL's HPCC engine takes to handle one (``hpcc_ack_gap_ns``); the fabric carries them back
unchanged into the RTL's INT-ACK parser, feeder and HPCC engine.  The bridge records every INT-echo ACK it hands to
``rx_s_axis`` and every event of the engine; ``hpcc_replay`` feeds the ACKs to ``sw.cc.Hpcc`` and compares the
engine's rate ACK by ACK and every QP_RATE read bit for bit.  With cc none the model (``sw.cc.NoCc``) holds the rate
the host set.

Goodput: the RTL's is the payload the receiver accepted over its sending window (first doorbell to last frame out, in
RTL clocks = network time); a software sender's its WRITE's bytes over its completion time.  The receiver sums every
sender's payload per bin of network time (the plot; ``jain`` over the second half of the span from the first to the
last payload it received).  ``drops``: the larger of the switches' drop counters (every flow) and the RTL frames the
receiver never saw, both lower bounds of the frames lost.  Dilation: given, or from the measured free-running speed
as ``hil bench`` picks it (``time_dilation >= 400e6 / cycles_per_s``, times ``HEADROOM``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sw.apps.hil import hpcc_replay
from sw.apps.hil.bench import FORMULA, HEADROOM, min_dilation
from sw.apps.hil.launch import BridgeError, bridge_config, free_run, live_in_group, start_bridge
from sw.apps.hil.model import CLK_HZ, CLK_NS, HilSizes, ensure_model
from sw.apps.hil.rate_replay import RX_PIPELINE_NS, RateRead, replay
from sw.apps.hil.traffic import configure_dcqcn, configure_hpcc, configure_qp, flow_of, frame_bytes
from sw.apps.incast_bench import jain
from sw.cc import DcqcnParams, HpccParams, RateToIncrement
from sw.cc.nic_regs import TX_WIRE_OVERHEAD_BYTES
from sw.clock import ENV_DILATION, get_clock, set_clock
from sw.clock.lag import fidelity
from sw.roce.softnic.qp_pacer import make_cc, make_np
from sw.roce.wire.int_md import INT_HOP_BYTES, INT_MD_BYTES, INT_SHIM_BYTES, MAX_INT_HOPS
from sw.units import ROCE_DATA_FRAME_OVERHEAD_BYTES
from sw.units.plot import plot_figure

RTL_LOAD = 0.8            # the busiest hop's load (INT included): below line rate, so cc none drops nothing
FREE_FRAMES = 2000        # frames of the free-running speed measurement that picks the dilation (as hil bench)
TRACE_SAMPLES = 20        # QP_RATE and TX_FRAMES samples over the run (the plot, the rate trace)
DCQCN_SAMPLE_NS = 5_000   # with cc dcqcn|hpcc, a QP_RATE read at least this often (network time): the compared trace
HPCC_BASE_RTT_NS = 4_000  # HPCC's T for the RTL and the software senders (incast_bench's default --base-rtt)
HPCC_ACK_HEADROOM = 2     # the receiver's ACK gap over the HPCC engine's time per ACK (its FIFO rides out bridge lag)
RATE_BINS = 40            # the receiver's bins of payload per sender over the run (the plot, Jain)
SETTLE_NS = 100_000       # network time between the receiver's end and the RTL's final counters
PROBE_POLL_NS = 2_000     # the bad-ICRC probe reads RX_ICRC_ERRORS this often (network time) ...
PROBE_WAIT_NS = 200_000   # ... until it counts the frame, at most this long (the fabric's path is a few us)
STORE_POLL_WALL_S = 0.005  # how often (wall) the run looks at the incast roles' rendezvous keys
QUIET_WALL_S = 20.0       # the receiver gives up after this long (wall) without a frame
RUN_WALL_S = 600.0        # the run's hang guard (wall seconds beyond the paced duration)
BRIDGE_EXIT_WAIT_S = 5.0  # a control socket that closed: how long (wall) the testbench may take to be seen exited
CC_RUNNABLE = ("none", "dcqcn", "hpcc")


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
    """The RTL QP's payload rate that keeps every hop at <= ``RTL_LOAD`` of the link rate, counting the RoCEv2
    framing, the Ethernet overhead and the INT stack the fabric grows on the way (up to ``MAX_INT_HOPS``)."""
    int_bytes = INT_SHIM_BYTES + INT_MD_BYTES + MAX_INT_HOPS * INT_HOP_BYTES
    return RTL_LOAD * link_rate_bps * mtu_bytes / (mtu_bytes + TX_WIRE_OVERHEAD_BYTES + int_bytes)


def limiter_rate_bps(payload_bps: float, mtu_bytes: int) -> float:
    """The limiter's (wire) rate that sends MTU frames at ``payload_bps`` of payload: it charges each frame its
    payload and ``TX_WIRE_OVERHEAD_BYTES``."""
    return payload_bps * (mtu_bytes + TX_WIRE_OVERHEAD_BYTES) / mtu_bytes


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


def software_senders(topo: Any, hil_host: str, receiver: str) -> list[str]:
    """The incast's other senders: every host but the RTL's and the receiver."""
    return [h for h in topo.servers if h not in (hil_host, receiver)]


def run_hil(fabric_opts: dict[str, Any], *, hil_host: str, cc: str, duration_ns: int, dilation: float | None,
            workdir: Path | None = None, echo=None, bad_icrc_probe: bool = False) -> dict[str, Any]:
    """Bring the fabric up, run the RTL NIC on ``hil_host`` and the software senders into one receiver, tear
    everything down (also on failure: a ``HilRunError`` then says, and holds in ``leftovers``, what outlived the
    run); the ``hil run`` JSON.  ``workdir`` (kept) holds the receiver's capture ``receiver.pcap``; without one a
    temporary directory is used and removed after a good run.  ``bad_icrc_probe`` (cc dcqcn): before the first
    doorbell the receiver's host sends the RTL's QP a CNP with a wrong ICRC (``sw.roce``'s template, last ICRC byte
    flipped), and ``rtl.bad_icrc_probe`` holds RX_ICRC_ERRORS, CNP_RECEIVED and QP_RATE before and after it."""
    from emu.cli import apply_dilation
    from emu.fabric import Fabric
    from emu.reap import owned_tempdir
    from sw.collectives.fabric_topology import Topology

    if cc not in CC_RUNNABLE:
        raise HilRunError(f"--cc {cc}: not runnable; allowed: {', '.join(CC_RUNNABLE)}")
    if bad_icrc_probe and cc != "dcqcn":
        raise HilRunError(f"bad_icrc_probe: needs cc dcqcn (a CNP that must cut no rate), not {cc}")
    topo = Topology(fabric_opts["spec"])
    receiver = pick_receiver(topo, hil_host)
    if os.geteuid() != 0:
        raise HilRunError("starpulse hil run: needs root (network namespaces and AF_PACKET); run it with sudo")
    if cc == "dcqcn" and fabric_opts.get("int_sink") != "report":
        fabric_opts = {**fabric_opts, "int_sink": "report"}
        if echo:
            echo("hil run: --cc dcqcn: the leaves sink INT toward the hosts (--int-sink report): the RTL's parser "
                 "reads a CNP's BTH right after UDP")
    if cc == "hpcc" and fabric_opts.get("int_sink") != "host":
        fabric_opts = {**fabric_opts, "int_sink": "host"}
        if echo:
            echo("hil run: --cc hpcc: the leaves leave INT to the hosts (--int-sink host): the receiver echoes it")
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
    others = software_senders(topo, hil_host, receiver)
    n_senders = 1 + len(others)
    line_payload_bps = payload_rate_bps(spec.link_rate_bps, sizes.mtu_bytes) / RTL_LOAD
    rate_bps = payload_rate_bps(spec.link_rate_bps, sizes.mtu_bytes)
    # every sender moves the same payload, what ``duration`` at the fair share of the receiver's link carries in
    # MTU frames, so none finishes early by its size and Jain over the last half compares senders still sending
    share_frames = frames_for(duration_ns, line_payload_bps / n_senders, sizes.mtu_bytes)
    n_frames = frames_for(duration_ns, rate_bps, sizes.mtu_bytes) if n_senders == 1 else share_frames
    share_bytes = share_frames * sizes.mtu_bytes
    src, dst = topo.nics_of(hil_host)[0], topo.nics_of(receiver)[0]
    qpns = flow_of({}, 0)       # the bridge's QP numbers; the addresses are the fabric's (next hop: the leaf)
    flow = {"src_mac": src.mac, "dst_mac": src.gateway_mac, "src_ip": src.ip, "dst_ip": dst.ip,
            "src_qpn": qpns.src_qpn, "dst_qpn": qpns.dst_qpn}
    # the receiver's CNPs to the RTL's QP: its own addresses, next hop its leaf
    back = {"src_mac": dst.mac, "dst_mac": dst.gateway_mac, "src_ip": dst.ip, "dst_ip": src.ip,
            "src_qpn": qpns.dst_qpn, "dst_qpn": qpns.src_qpn}
    (work / "loop").mkdir(exist_ok=True)
    cfg = bridge_config(work / "loop", sizes, ifname=src.ifname, rate_bps=spec.link_rate_bps, flow=flow)
    cfg["cc"] = cc                      # hpcc: the bridge records INT-echo ACKs and the HPCC engine's events
    if echo:
        echo(f"hil run: fabric {spec.servers} servers x {spec.gpus_per_server} GPUs, {spec.pods} pods, "
             f"{spec.spines} spines at {spec.link_rate_bps / 1e9:g} Gb/s; RTL NIC on {src.ifname} -> {receiver} "
             f"({dst.ip}), cc {cc}: {n_frames} frames"
             + (f"; software senders {', '.join(others)}: {share_bytes} bytes each" if others else "")
             + f"; {duration_ns / 1e6:g} ms of network time at the fair share")
    prev_clock, prev_env = get_clock(), os.environ.get(ENV_DILATION)
    apply_dilation(dilation, None)      # the process's clock and $STARPULSE_TIME_DILATION for switches and bridge
    run = RunPlan(cfg=cfg, sizes=sizes, cc=cc, hil_host=hil_host, receiver=receiver, rx_ifname=dst.ifname,
                  n_frames=n_frames, rate_bps=rate_bps, work=work, back=back, others=others,
                  share_bytes=share_bytes, bin_ns=max(1_000, duration_ns // RATE_BINS),
                  dcqcn=make_cc("dcqcn", spec.link_rate_bps).params if cc == "dcqcn" else None,
                  hpcc=make_cc("hpcc", spec.link_rate_bps, base_rtt_ns=HPCC_BASE_RTT_NS).params
                  if cc == "hpcc" else None, bad_icrc_probe=bad_icrc_probe)
    try:
        fab = Fabric(**fabric_opts)
        try:
            with fab:
                out = _run_on(fab, run)
        except HilRunError as exc:      # torn down by now: say what outlived the failed run
            exc.leftovers = run_leftovers(fab, run)
            exc.args = (f"{exc.args[0]}; left behind: {', '.join(exc.leftovers) or 'nothing'}",)
            raise
        out["leftovers"] = run_leftovers(fab, run)
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


def run_leftovers(fab: Any, run: RunPlan) -> list[str]:
    """What outlived the run: the fabric's processes, namespaces and interfaces, the bridge's process group."""
    from emu.net import leftovers

    left = leftovers(fab.footprint) if fab.footprint is not None else []
    pgid = run.bridge_pgid
    return left + ([f"hil bridge process {pid}" for pid in live_in_group(pgid)] if pgid is not None else [])


@dataclass
class RunPlan:
    """What ``_run_on`` runs: the bridge's configuration, the flows, the sizes, the congestion control."""

    cfg: dict[str, Any]
    sizes: HilSizes
    cc: str
    hil_host: str
    receiver: str
    rx_ifname: str
    n_frames: int
    rate_bps: float
    work: Path
    back: dict[str, Any]        # the receiver's CNPs to the RTL's QP (sw.roce.Flow's fields)
    others: list[str]           # the software senders
    share_bytes: int            # each software sender's WRITE
    bin_ns: int                 # the receiver's bins of payload per sender
    dcqcn: DcqcnParams | None   # the parameters the driver writes (cc dcqcn)
    hpcc: HpccParams | None = None  # the parameters the driver writes (cc hpcc)
    bad_icrc_probe: bool = False    # a bad-ICRC CNP to the RTL before the first doorbell (cc dcqcn)
    bridge_pgid: int | None = None  # the bridge's process group, once started

    @property
    def qlen_unit_bytes(self) -> int:
        """HPCC's INT queue unit: one MTU frame (the fabric counts packets), as the host stack converts it."""
        return self.sizes.mtu_bytes + ROCE_DATA_FRAME_OVERHEAD_BYTES


def _start_incast(fab: Any, run: RunPlan, store_dir: Path) -> list[subprocess.Popen]:
    """The software senders and their receiver (``sw.apps.incast_bench`` roles, one WRITE each) in their hosts'
    namespaces, connected (their rendezvous keys set) and waiting for "go" in ``store_dir``."""
    from sw.units.file_store import FileStore

    if not run.others:
        return []
    topo = fab.topo
    rate = topo.spec.link_rate_bps
    common = ["--store", str(store_dir), "--size", str(run.share_bytes), "--senders", str(len(run.others)),
              "--cc", run.cc, "--link-rate", str(rate), "--base-rtt", f"{HPCC_BASE_RTT_NS}ns",
              "--path-mtu", str(run.sizes.mtu_bytes)]
    me = [sys.executable, "-m", "sw.apps.incast_bench"]
    procs = []
    for k, host in enumerate([*run.others, run.receiver]):
        nic = topo.nics_of(host)[0]
        role = ["receiver"] if host == run.receiver else ["sender", "--index", str(k)]
        procs.append(fab.net.hosts[host].popen([*me, *role, "--dev", nic.ifname, "--gateway-mac", nic.gateway_mac,
                                                *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                               text=True))
    fab.helper_procs.extend(procs)
    store = FileStore(str(store_dir))
    keys = ["rx_ready", *(f"ready{i}" for i in range(len(run.others)))]
    clock = get_clock()
    deadline_ns = clock.now_ns() + int(clock.net_duration_ns(RUN_WALL_S * 1e9))
    while not all(store.get(k) for k in keys):
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise HilRunError(f"hil run: a software incast role exited ({dead[0].returncode}): "
                              f"{(dead[0].stderr.read() if dead[0].stderr else '').strip()[-300:]}")
        if clock.now_ns() > deadline_ns:
            raise HilRunError("hil run: the software senders did not connect in time")
        clock.sleep_ns(int(clock.net_duration_ns(STORE_POLL_WALL_S * 1e9)))
    return procs


def _incast_results(procs: list[subprocess.Popen], run: RunPlan) -> list[dict[str, Any]]:
    """Each role's JSON report (senders first, the receiver last), once they are done."""
    clock = get_clock()
    wall_s = clock.wall_duration_ns(run.share_bytes * 8e9 / 1e6) / 1e9 + RUN_WALL_S   # at >= 1 Mb/s, plus slack
    out = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=wall_s)
        except subprocess.TimeoutExpired:
            raise HilRunError("hil run: the software senders did not finish") from None
        lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise HilRunError(f"hil run: a software incast role failed (exit {proc.returncode}): "
                              f"{stderr.strip().splitlines()[-1:] or stdout[-300:]}")
        out.append(json.loads(lines[-1]))
    return out


def _run_on(fab: Any, run: RunPlan) -> dict[str, Any]:
    """The run on the fabric that is up: bridge on the RTL's host, QP 0 configured, receiver and software senders
    started, "go" and the doorbell, traced until every RTL frame is out and every software WRITE done; bridge,
    receiver and roles stopped also on failure."""
    from sw.roce.softnic.rtl_nic_driver import RtlNicDriver
    from sw.units.file_store import FileStore

    clock = get_clock()
    cfg, sizes, n_frames, work = run.cfg, run.sizes, run.n_frames, run.work
    pcap, verdict, stop = work / "receiver.pcap", work / "receiver.json", work / "receiver.stop"
    bridge = start_bridge(fab.net.hosts[run.hil_host], cfg, clock.dilation)
    run.bridge_pgid = bridge.proc.pid
    probe: dict[str, Any] | None = None
    peer = None
    trace: list[dict[str, Any]] = []
    held: DcqcnParams | None = None
    held_hpcc: HpccParams | None = None
    roles: list[subprocess.Popen] = []
    (work / "store").mkdir(exist_ok=True)
    try:
        port = bridge.wait_ready()
        driver = RtlNicDriver(port)
        share = limiter_rate_bps(run.rate_bps, sizes.mtu_bytes) / (int(cfg["data_width"]) * CLK_HZ)
        asyncio.run(configure_qp(driver, 0, cfg, rate_share=share))
        if run.dcqcn is not None:
            held = asyncio.run(configure_dcqcn(driver, 0, run.dcqcn))
        if run.hpcc is not None:
            held_hpcc = asyncio.run(configure_hpcc(driver, 0, run.hpcc, run.qlen_unit_bytes))
        rate_reg = asyncio.run(driver.qp_rate(0))
        if run.bad_icrc_probe:
            probe = asyncio.run(bad_icrc_probe(fab, run, driver))
        np_args = ["--cnp-flow", json.dumps(run.back),
                   "--cnp-interval-ns", str(make_np().params.cnp_interval_ns)] if run.dcqcn is not None else []
        if run.hpcc is not None:
            np_args = ["--int-echo-flow", json.dumps(run.back), "--ack-gap-ns", str(hpcc_ack_gap_ns(sizes))]
        peer = fab.net.hosts[run.receiver].popen(
            [sys.executable, "-m", "sw.apps.hil.peer", "recv", "--ifname", run.rx_ifname, "--frames", str(n_frames),
             "--pcap", str(pcap), "--json", str(verdict), "--timeout-s", str(QUIET_WALL_S),
             "--dest-qpn", str(run.back["src_qpn"]), "--bin-ns", str(run.bin_ns), "--stop-file", str(stop), *np_args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if peer.stdout is None or peer.stdout.readline().strip() != "ready":
            raise HilRunError(f"hil run: the receiver on {run.receiver} did not start")
        roles = _start_incast(fab, run, work / "store")

        async def send_and_trace() -> None:
            step_ns = max(1, int(n_frames * (sizes.mtu_bytes * 8e9 / run.rate_bps) / TRACE_SAMPLES))
            if run.dcqcn is not None or run.hpcc is not None:
                step_ns = min(step_ns, DCQCN_SAMPLE_NS)
            deadline_ns = clock.now_ns() + int(n_frames * sizes.mtu_bytes * 8e9 / run.rate_bps) * 20 + \
                int(clock.net_duration_ns(RUN_WALL_S * 1e9))
            if roles:
                FileStore(str(work / "store")).set("go", True)
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

        asyncio.run(send_and_trace())
        results = _incast_results(roles, run)
        stop.write_text("stop\n")
        try:
            peer.wait(timeout=QUIET_WALL_S * 3 + clock.wall_duration_ns(1e6) / 1e9)
        except subprocess.TimeoutExpired:
            raise HilRunError(f"hil run: the receiver on {run.receiver} did not finish") from None
        clock.sleep_ns(SETTLE_NS)       # the receiver's last CNP crosses the fabric before the counters are read
        counters = asyncio.run(driver.counters(("TX_FRAMES", "CNP_RECEIVED", "INT_ACKS", "RX_ICRC_ERRORS",
                                                "INT_ACKS_DROPPED", "HPCC_UPDATES")))
        figures = bridge.finish(port)
    except (EOFError, OSError) as exc:      # the control socket closed: a testbench that exited is the run's end
        try:
            bridge.proc.wait(timeout=BRIDGE_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            raise exc from None
        raise HilRunError(f"hil run: the RTL NIC's testbench exited mid-run (exit {bridge.proc.returncode}, "
                          f"{type(exc).__name__} on its control socket); see {bridge.log}") from exc
    finally:
        bridge.kill()
        if peer is not None and peer.poll() is None:
            peer.kill()
            peer.wait(timeout=10)
        for proc in roles:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    if not verdict.exists():
        raise HilRunError(f"hil run: the receiver on {run.receiver} wrote no verdict (exit {peer.returncode})")
    judged = json.loads(verdict.read_text())
    status = fab.status()
    lag = fab.lag()         # the switches', the bridge's (its lag file) and this process's components
    window_ns = figures["window_cycles"] * CLK_NS
    goodput = judged["payload_ok"] * sizes.mtu_bytes * 8e9 / window_ns if window_ns else None
    cps = figures.get("cycles_per_s")
    names = {fab.topo.nics_of(h)[0].ip: h for h in fab.topo.servers}
    senders = [{"name": run.hil_host, "kind": "rtl", "goodput_bps": round(goodput) if goodput is not None else None}]
    for host, res in zip(run.others, results, strict=False):
        senders.append({"name": host, "kind": "software",
                        "goodput_bps": round(res["bytes"] * 8e9 / res["completion_ns"]) if res["ok"] else 0})
    bins = judged.pop("bins")
    series = {names.get(ip, ip): per for ip, per in bins["by_src"].items()}
    rtl_lost = max(0, counters["TX_FRAMES"] - judged["frames"])
    rtl = {"frames_tx": counters["TX_FRAMES"], "cnp_received": counters["CNP_RECEIVED"],
           "int_acks": counters["INT_ACKS"], "rx_icrc_errors": counters["RX_ICRC_ERRORS"],
           "rate_bps": round(run.rate_bps), "qp_rate_reg": rate_reg, "rate_trace": trace, "mtu_bytes": sizes.mtu_bytes,
           "cnp_arrival_cycles": figures["cnp_cycles"]}
    reads = [RateRead(*r) for r in figures["rate_reads"]]
    if probe is not None:
        rtl["bad_icrc_probe"] = probe
    if held is not None:
        init = next((c, f) for c, q, f in figures["qp_init_cycles"][::-1] if q == 0)
        rtl["dcqcn_params"] = dataclasses.asdict(held)
        rtl["replay"] = replay(held, clk_ns=CLK_NS, qp=0, init=init, cnp_cycles=figures["cnp_cycles"], reads=reads,
                               mtu_bytes=sizes.mtu_bytes, lag_ns=replay_lag_ns(sizes), conv=RateToIncrement())
        rtl["rate_trace_matches_model"] = rtl["replay"]["matches"]
    elif held_hpcc is not None:
        rtl.update(int_acks_dropped=counters["INT_ACKS_DROPPED"], hpcc_updates=counters["HPCC_UPDATES"],
                   int_ack_arrival_cycles=[c for c, _ in figures["int_ack_frames"]],
                   hpcc_params=dataclasses.asdict(held_hpcc), hpcc_qlen_unit_bytes=run.qlen_unit_bytes)
        events = [hpcc_replay.HpccEvent(*e) for e in figures["hpcc_events"]]
        rtl["replay"] = hpcc_replay.replay(held_hpcc, clk_ns=CLK_NS, qp=0, qlen_unit_bytes=run.qlen_unit_bytes,
                                           ack_frames=figures["int_ack_frames"], events=events, reads=reads,
                                           conv=RateToIncrement())
        rtl["hpcc_events"] = [dataclasses.asdict(e) for e in events]
        rtl["rate_trace_matches_model"] = rtl["replay"]["matches"]
    else:
        # cc none: the golden model (sw.cc.NoCc) holds the rate the host set; every read must show it
        rtl["rate_trace_matches_model"] = all(r.value == rate_reg for r in reads if r.qp == 0) and bool(reads)
    return {
        "senders": senders,
        "jain": last_half_jain(series, [s["name"] for s in senders]),
        "receiver": {"name": run.receiver, **judged, "gaps": judged["frames"] - judged["psn_in_order"],
                     "pcap": str(pcap)},
        "software": results,
        "drops": max(rtl_lost, status["totals"]["drops"]),
        "rtl_frames_lost": rtl_lost,
        "fabric_drops": status["totals"]["drops"],
        "rtl": rtl,
        "throughput_bins": {"bin_ns": bins["bin_ns"], "payload_bytes": series},
        "frames": n_frames,
        "cycles_per_s": cps,
        "bridge": {k: figures[k] for k in ("cycles", "rtl_ns", "net_ns", "slept_s", "frames_tx", "frames_rx",
                                           "window_cycles", "busy_wall_s")},
        "fidelity": fidelity(lag, clock.dilation),
        "fidelity_components": sorted(lag),
    }


async def bad_icrc_probe(fab: Any, run: RunPlan, driver: Any) -> dict[str, Any]:
    """From the receiver's host, a CNP of the RTL's QP with a wrong ICRC (``peer inject --cnp --bad-icrc``) across
    the fabric; once RX_ICRC_ERRORS counted it and the RTL's reaction time (``replay_lag_ns``) passed: RX_ICRC_ERRORS,
    CNP_RECEIVED and QP_RATE before and after (issue 17 item 6d: counted, no rate cut)."""
    clock = get_clock()
    names = ("RX_ICRC_ERRORS", "CNP_RECEIVED")
    before = {**await driver.counters(names), "QP_RATE": await driver.qp_rate(0)}
    inj = fab.net.hosts[run.receiver].popen(
        [sys.executable, "-m", "sw.apps.hil.peer", "inject", "--ifname", run.rx_ifname, "--flow", json.dumps(run.back),
         "--cnp", "--bad-icrc"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out_text, _ = inj.communicate(timeout=QUIET_WALL_S)
    if inj.returncode != 0:
        raise HilRunError(f"hil run: the bad-ICRC injection on {run.receiver} failed: {out_text.strip()[-300:]}")
    waited_ns = 0
    while (await driver.counters(names[:1]))["RX_ICRC_ERRORS"] == before["RX_ICRC_ERRORS"]:
        if waited_ns > PROBE_WAIT_NS:
            raise HilRunError(f"hil run: the bad-ICRC CNP from {run.receiver} never counted in RX_ICRC_ERRORS "
                              f"({PROBE_WAIT_NS} ns of network time)")
        clock.sleep_ns(PROBE_POLL_NS)
        waited_ns += PROBE_POLL_NS
    clock.sleep_ns(replay_lag_ns(run.sizes))
    after = {**await driver.counters(names), "QP_RATE": await driver.qp_rate(0)}
    return {"injected": 1, "before": before, "after": after}


def replay_lag_ns(sizes: HilSizes) -> int:
    """How far the RTL's rate may trail the model's: its reaction point's sweep interval plus the RX pipeline."""
    from hw.dcqcn import sweep_interval_ns

    return int(sweep_interval_ns(sizes.n_qps, int(CLK_NS * 1000))) + RX_PIPELINE_NS


def hpcc_ack_gap_ns(sizes: HilSizes) -> int:
    """The least network time between two INT-echo ACKs to the RTL: ``HPCC_ACK_HEADROOM`` times its HPCC engine's
    time per ACK at the most INT hops (``HpccEngine.ack_ii_clocks``), so ACKs never pile up in its event FIFO however
    fast frames arrive, while a slow sender gets one per frame (2,930 ns: every 256-byte frame below a wire rate of
    0.92 Gb/s, every second one at the fair share of three on 4 Gb/s, as a software sender whose window of about two
    frames fills asks for one)."""
    from hw.nic_top import NicCcTop

    engine = NicCcTop(**dataclasses.asdict(sizes)).hpcc
    return math.ceil(HPCC_ACK_HEADROOM * engine.ack_ii_clocks(MAX_INT_HOPS) * CLK_NS)


def last_half_jain(series: dict[str, list[int]], names: list[str]) -> float | None:
    """Jain's index among ``names`` of the payload each delivered in the second half of the receiver's bins."""
    n_bins = max((len(v) for v in series.values()), default=0)
    if not n_bins:
        return None
    half = [sum(series.get(name, [])[n_bins // 2:]) for name in names]
    return round(jain(half), 6) if any(half) else None


def plot(out: dict[str, Any], path: str) -> None:
    """Every sender's payload throughput at the receiver over network time (its bins), and the RTL's QP_RATE as a
    payload rate (the limiter's rate is a wire rate: MTU frames carry ``mtu / (mtu + TX_WIRE_OVERHEAD_BYTES)`` of it
    as payload), from the RTL's first doorbell."""
    with plot_figure(path, figsize=(8, 4.5)) as (_, ax):
        bins = out["throughput_bins"]
        bin_ns = bins["bin_ns"]
        kinds = {s["name"]: s["kind"] for s in out["senders"]}
        for name, per in sorted(bins["payload_bytes"].items()):
            t_ms = [(k + 0.5) * bin_ns / 1e6 for k in range(len(per))]
            ax.plot(t_ms, [b * 8 / bin_ns for b in per], "-o", ms=3,
                    label=f"{name} ({kinds.get(name, '?')}) received, payload Gb/s")
        trace = out["rtl"]["rate_trace"]
        if trace:
            t0 = trace[0]["rtl_ns"]
            name = out["senders"][0]["name"]
            mtu = out["rtl"]["mtu_bytes"]
            payload = mtu / (mtu + TX_WIRE_OVERHEAD_BYTES)
            ax.step([(s["rtl_ns"] - t0) / 1e6 for s in trace],
                    [s["qp_rate"] * 8 * CLK_HZ / (1 << 24) / 1e9 * payload for s in trace],
                    "--", where="post", label=f"{name} QP_RATE (RTL), payload Gb/s")
        ax.set_xlabel("network time since the start (ms)")
        ax.set_ylabel("Gb/s")
        ax.set_title(f"hil run, cc {out['cc']}, dilation {out['time_dilation']:g}, Jain {out['jain']}, drops "
                     f"{out['drops']}, model match {out['rtl']['rate_trace_matches_model']}, fidelity ok "
                     f"{out['fidelity']['ok']}", fontsize=9)
        ax.legend(fontsize=8)
