"""``starpulse hil bench``: the RTL NIC's simulation speed free-running and bridged onto a veth, the time
dilation that speed implies, frames/s through the bridge and the bridge's cost.

Dilation formula: the RTL keeps up with network time when it simulates at least 400e6 clocks per second of
network time, i.e. ``time_dilation >= 400e6 / cycles_per_s`` (cycles_per_s: in the loop, wall clock, pacing
waits excluded).  The in-loop run (``run_in_loop``: two namespaces and a veth, the bridge on one end, ``peer``
on the other, the NIC configured over the control socket by ``RtlNicDriver``) is also what the ``hil`` test runs.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from emu.netns import NetnsLab
from emu.reap import owned_tempdir
from sw.apps.hil.launch import BridgeError, bridge_config, free_run, start_bridge
from sw.apps.hil.model import CLK_HZ, HilSizes, ensure_model
from sw.apps.hil.traffic import configure_qp, flow_of, frame_bytes
from sw.clock.lag import ENV_LAG_DIR, fidelity, read_lag_dir
from sw.roce.softnic.rtl_nic_driver import RtlNicDriver

HEADROOM = 2.0        # the dilation the bench picks: this many times the minimum the free-running speed implies
NIC_MAC, PEER_MAC = "02:53:00:00:00:01", "02:53:00:00:01:01"
NIC_IP, PEER_IP = "10.250.0.1", "10.250.0.2"
FORMULA = "time_dilation >= 400e6 / cycles_per_s"


def min_dilation(cycles_per_s: float) -> float:
    """The least dilation at which a model simulating ``cycles_per_s`` keeps up with network time (2.5 ns/clock)."""
    return CLK_HZ / cycles_per_s


def run_in_loop(workdir: Path, sizes: HilSizes, *, frames: int, dilation: float, rate_share: float = 1.0,
                bad_icrc_frames: int = 0, prefix: str | None = None) -> dict[str, Any]:
    """The bridge on ``nic``'s eth0 of a namespace pair, ``peer`` receiving on the other end: QP 0 configured
    through the driver over the control socket sends ``frames`` frames; ``bad_icrc_frames`` frames with a
    wrong ICRC are injected from the peer.  Everything is torn down also on failure."""
    lag_dir = workdir / "lag"
    lag_dir.mkdir(parents=True, exist_ok=True)
    os.environ[ENV_LAG_DIR] = str(lag_dir)
    flow = {**asdict(flow_of({}, 0)), "src_mac": NIC_MAC, "dst_mac": PEER_MAC, "src_ip": NIC_IP, "dst_ip": PEER_IP}
    flow.pop("ip_version", None)
    cfg = bridge_config(workdir, sizes, ifname="eth0", flow=flow)
    with NetnsLab(prefix=prefix) as lab:
        nic, peer = lab.add_host("nic"), lab.add_host("peer")
        lab.add_link(nic, peer, ifname_a="eth0", ifname_b="eth0", mac_a=NIC_MAC, mac_b=PEER_MAC, mtu=9000)
        for host in (nic, peer):
            host.cmd("sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1", check=False)
        pcap, verdict = workdir / "peer.pcap", workdir / "peer.json"
        receiver = peer.popen([sys.executable, "-m", "sw.apps.hil.peer", "recv", "--ifname", "eth0", "--frames",
                               str(frames), "--pcap", str(pcap), "--json", str(verdict), "--timeout-s", "60"],
                              stdout=subprocess.PIPE, text=True)
        if receiver.stdout is None or receiver.stdout.readline().strip() != "ready":
            raise BridgeError("hil peer receiver did not start")
        bridge = start_bridge(nic, cfg, dilation)
        try:
            port = bridge.wait_ready()
            driver = RtlNicDriver(port)

            async def drive() -> dict[str, int]:
                await configure_qp(driver, 0, cfg, rate_share=rate_share)
                for n in frame_bytes(frames, sizes.mtu_bytes):
                    await driver.ring(0, n)
                return await driver.counters(("RX_ICRC_ERRORS",))

            before = asyncio.run(drive())
            receiver.wait(timeout=600)
            for k in range(bad_icrc_frames):
                peer_flow = {**flow, "src_mac": PEER_MAC, "dst_mac": NIC_MAC, "src_ip": PEER_IP, "dst_ip": NIC_IP,
                             "src_qpn": flow["dst_qpn"], "dst_qpn": flow["src_qpn"]}
                peer.cmd(sys.executable, "-m", "sw.apps.hil.peer", "inject", "--ifname", "eth0", "--flow",
                         json.dumps(peer_flow), "--psn", str(k), "--bad-icrc")

            async def read_errors() -> dict[str, int]:
                counts = await driver.counters(("RX_ICRC_ERRORS", "TX_FRAMES"))
                for _ in range(200):     # each read is a round trip of RTL time: the frame gets through
                    if counts["RX_ICRC_ERRORS"] >= before["RX_ICRC_ERRORS"] + bad_icrc_frames:
                        break
                    counts = await driver.counters(("RX_ICRC_ERRORS", "TX_FRAMES"))
                return counts

            after = asyncio.run(read_errors())
            figures = bridge.finish(port)
        finally:
            bridge.kill()
    comps = read_lag_dir(lag_dir)
    return {"bridge": figures, "peer": json.loads(verdict.read_text()), "pcap": str(pcap),
            "counters_before": before, "counters": after, "fidelity": fidelity(comps, dilation),
            "time_dilation": dilation}


def run_bench(frames: int, dilation: float | None, echo=None) -> dict[str, Any]:
    """Free-running reference, then the same traffic bridged at ``dilation`` (default: HEADROOM x the minimum)."""
    if os.geteuid() != 0:
        raise BridgeError("starpulse hil bench: needs root (network namespaces and AF_PACKET); run it with sudo")
    sizes = HilSizes()
    ensure_model(sizes, echo=echo)
    work = owned_tempdir("starpulse-hil-")
    (work / "free").mkdir()
    free = free_run(bridge_config(work / "free", sizes, ifname=None, free_frames=frames))
    if not free.get("cycles_per_s"):
        raise BridgeError(f"free-running testbench measured no window; see {work / 'free' / 'tb.log'}")
    k = dilation or float(math.ceil(min_dilation(free["cycles_per_s"]) * HEADROOM))
    if echo:
        echo(f"hil bench: free-running {free['cycles_per_s']} cycles/s -> bridged run at time dilation {k:g}")
    (work / "loop").mkdir()
    loop = run_in_loop(work / "loop", sizes, frames=frames, dilation=k)
    b = loop["bridge"]
    cps = b["cycles_per_s"]
    out = {
        "sizes": asdict(sizes),
        "frames": frames,
        "cycles_per_s_free": free["cycles_per_s"],
        "cycles_per_s": cps,
        "time_dilation_min": round(min_dilation(cps), 1) if cps else None,
        "dilation_formula": FORMULA,
        "time_dilation": k,
        "frames_per_s": round(b["frames_tx"] / b["busy_wall_s"], 1) if b["busy_wall_s"] else None,
        "frames_tx": b["frames_tx"],
        "frames_received_ok": loop["peer"]["icrc_ok"],
        "bridge_cost": round(free["cycles_per_s"] / cps, 3) if cps else None,
        "paced_wall_s": b["slept_s"],
        "fidelity": loop["fidelity"],
    }
    shutil.rmtree(work, ignore_errors=True)     # kept on failure: the error names the log in it
    return out


def print_text(out: dict[str, Any]) -> None:
    print(f"RTL nic_cc_top {out['sizes']} (Verilator)")
    print(f"  free-running   {out['cycles_per_s_free']:>12} cycles/s")
    print(f"  in the loop    {out['cycles_per_s']:>12} cycles/s (pacing waits excluded), "
          f"bridge cost x{out['bridge_cost']}")
    print(f"  dilation       {FORMULA} = {out['time_dilation_min']}; ran at {out['time_dilation']:g}")
    print(f"  through bridge {out['frames_per_s']} frames/s (wall), {out['frames_received_ok']}/{out['frames']} "
          "received with a valid ICRC")
    print(f"  fidelity       ok={out['fidelity']['ok']} lag p99 {out['fidelity']['lag_p99_ns']} ns")
