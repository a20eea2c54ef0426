"""Hardware in the loop on a fabric (issue 17 items 6a and 6e): the RTL NIC (Verilator) as host s0's NIC of a P4
fabric of two leaves and a spine sends one QP's frames to host s1 on the other leaf; the receiver
(``sw.apps.hil.peer``) judges every frame, the test re-checks its capture (sw.roce and an independent ICRC, tshark,
pattern, PSNs), the INT stack every frame arrived with shows the leaf-spine-leaf path, nothing is dropped and nothing
is left behind.  6e: a run on ``hil run``'s default fabric (two leaves of two servers: the software senders and
their receiver run beside the RTL) with the testbench SIGKILLed (its process group) once its first frames are out:
the run fails with a one-line error, and no process of the testbench's group or of the fabric (the software roles
too), no namespace and no interface of the fabric outlives it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hil_run import RTL_ALONE
from roce_tx_check import check_pattern_pcap

from sw.apps.hil.model import HilSizes, ensure_model

# the first hil test builds the Verilator model (minutes on 2 busy cores; once per RTL source): a hang guard
pytestmark = [pytest.mark.hil, pytest.mark.timeout(3600)]

MIN_FRAMES = 1000
DURATION = "1.2ms"      # at 4 Gb/s: ~1030 frames of 256 bytes (fabric_run.payload_rate_bps)
LINK_RATE = "4G"
KILL_AFTER_FRAMES = 20  # 6e: the testbench is killed once this many of its frames are out
KILL_DILATION = 20_000.0  # 6e: nothing is timed there; the bridge still paces, a few s of wall per 0.1 ms


def test_rtl_nic_sends_through_leaf_spine_leaf_to_a_software_receiver(tmp_path: Path) -> None:
    from emu.cli import fabric_options
    from sw.apps.hil.cli import add_run_arguments
    from sw.apps.hil.fabric_run import run_hil
    from sw.units.cli_guard import ArgumentParser

    sizes = HilSizes()
    ensure_model(sizes)
    parser = ArgumentParser(prog="starpulse hil run")
    add_run_arguments(parser)
    args = parser.parse_args([*RTL_ALONE, "--link-rate", LINK_RATE, "--duration", DURATION])
    out = run_hil(fabric_options(args), hil_host="s0", cc="none", duration_ns=args.duration, dilation=None,
                  workdir=tmp_path)
    (tmp_path / "out.json").write_text(json.dumps(out, indent=1))
    assert out["leftovers"] == [], "the run's processes, namespaces and interfaces must be gone"
    n = out["frames"]
    assert n >= MIN_FRAMES
    rx = out["receiver"]
    assert rx["name"] == "s1" and rx["bad"] == [], rx
    assert rx["frames"] == rx["icrc_ok"] == rx["payload_ok"] == rx["psn_in_order"] == n and rx["gaps"] == 0, rx
    assert rx["int_frames"] == n and rx["int_hop_counts"] == [3], rx   # leaf, spine, leaf stamped each frame
    check_pattern_pcap(Path(rx["pcap"]), n, 0, sizes.mtu_bytes)   # sw.roce + independent ICRC, tshark
    assert out["drops"] == 0 and out["fabric_drops"] == 0
    rtl = out["rtl"]
    assert rtl["frames_tx"] == out["bridge"]["frames_tx"] == n and rtl["rx_icrc_errors"] == 0
    assert rtl["rate_trace_matches_model"] is True and len(rtl["rate_trace"]) >= 2
    [sender] = out["senders"]
    # RTL time is exact: the paced payload rate over the sending window, whatever the load
    assert sender["name"] == "s0" and sender["kind"] == "rtl"
    assert abs(sender["goodput_bps"] / rtl["rate_bps"] - 1) < 0.05, (sender, rtl["rate_bps"])
    assert out["jain"] == 1.0
    assert out["cycles_per_s"] > 0 and out["time_dilation"] > 0
    comps = out["fidelity_components"]      # the bridge's lag merged with the switches'
    assert "hil bridge s0-eth0" in comps and any(c.startswith("p0l0 ") for c in comps), comps
    assert out["fidelity"]["time_dilation"] == out["time_dilation"]


def _kill_after_first_frames(ctl: Path, seen: dict[str, Any]) -> None:
    """Once the bridge's control socket exists: poll its stats over a connection of our own until
    ``KILL_AFTER_FRAMES`` frames are out, then SIGKILL its process group (the ``pgid`` it reports)."""
    from sw.roce.softnic.rtl_nic_socket import SocketNicPort

    deadline = time.monotonic() + 600
    while not ctl.exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    port = SocketNicPort(str(ctl))
    while (stats := port.stats())["frames_tx"] < KILL_AFTER_FRAMES:
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    seen.update(pgid=stats["pgid"], frames_tx=stats["frames_tx"])
    os.killpg(stats["pgid"], signal.SIGKILL)


def test_killing_the_testbench_mid_run_on_the_fabric_leaves_nothing_behind(tmp_path: Path) -> None:
    from emu.cli import fabric_options
    from sw.apps.hil.cli import add_run_arguments
    from sw.apps.hil.fabric_run import HilRunError, run_hil
    from sw.apps.hil.launch import live_in_group
    from sw.collectives.fabric_topology import Topology
    from sw.units.cli_guard import ArgumentParser

    ensure_model(HilSizes())
    parser = ArgumentParser(prog="starpulse hil run")
    add_run_arguments(parser)
    opts = fabric_options(parser.parse_args(["--link-rate", LINK_RATE, "--duration", "0.3ms"]))
    links = Topology(opts["spec"]).links
    ifnames = {lk.a_ifname for lk in links} | {lk.b_ifname for lk in links}
    netns_before = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    seen: dict[str, Any] = {}
    killer = threading.Thread(target=_kill_after_first_frames, args=(tmp_path / "loop" / "ctl.sock", seen),
                              daemon=True)
    killer.start()
    with pytest.raises(HilRunError) as failed:
        run_hil(opts, hil_host="s0", cc="none", duration_ns=300_000, dilation=KILL_DILATION, workdir=tmp_path)
    killer.join(timeout=60)
    assert seen.get("frames_tx", 0) >= KILL_AFTER_FRAMES, ("the testbench was not killed mid-run", seen)
    assert "exited mid-run" in str(failed.value) and "left behind: nothing" in str(failed.value), str(failed.value)
    assert failed.value.leftovers == []       # the fabric's processes, namespaces (by inode), interfaces; the group
    assert live_in_group(seen["pgid"]) == [], "a process of the testbench's group survived"
    assert ifnames and not ifnames & set(os.listdir("/sys/class/net")), "an interface of the fabric survived"
    assert subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout == netns_before
