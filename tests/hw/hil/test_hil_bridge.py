"""Hardware in the loop: nic_cc_top (Verilator) bridged onto a veth between two namespaces.  The NIC, configured
by RtlNicDriver over the bridge's control socket, sends one QP's frames; a plain AF_PACKET receiver on the peer
end judges them, the test re-checks its capture (sw.roce and an independent ICRC, tshark, pattern, PSNs); a frame
with a bad ICRC injected from the peer counts in RX_ICRC_ERRORS; nothing is left behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from roce_tx_check import check_pattern_pcap

from sw.apps.hil.bench import run_in_loop
from sw.apps.hil.model import HilSizes, ensure_model

# the first test builds the Verilator model (minutes on 2 busy cores; once per RTL source): a hang guard, not a target
pytestmark = [pytest.mark.hil, pytest.mark.timeout(3600)]

FRAMES = 240
DILATION = 20_000.0    # the frames, not the timing, are judged here: fidelity is reported, not asserted


def _netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_rtl_nic_sends_roce_on_a_veth_and_counts_a_bad_icrc(tmp_path: Path) -> None:
    sizes = HilSizes()
    ensure_model(sizes)
    before = _netns_names()
    out = run_in_loop(tmp_path, sizes, frames=FRAMES, dilation=DILATION, rate_share=0.25, bad_icrc_frames=1)
    assert _netns_names() == before, "the namespaces of the run must be gone"
    peer = out["peer"]
    assert peer["bad"] == []
    assert peer["frames"] == peer["icrc_ok"] == peer["payload_ok"] == peer["psn_in_order"] == FRAMES, peer
    check_pattern_pcap(Path(out["pcap"]), FRAMES, 0, sizes.mtu_bytes)   # sw.roce + independent ICRC, tshark
    assert out["counters_before"]["RX_ICRC_ERRORS"] == 0
    assert out["counters"]["RX_ICRC_ERRORS"] == 1
    assert out["counters"]["TX_FRAMES"] == out["bridge"]["frames_tx"] == FRAMES
    assert out["bridge"]["frames_rx"] >= 1 and out["bridge"]["cycles"] > 0
    assert out["fidelity"]["time_dilation"] == DILATION and out["fidelity"]["worst_component"] == "hil bridge eth0"


def test_killing_the_testbench_mid_run_leaves_nothing_behind(tmp_path: Path) -> None:
    """The bridge SIGKILLed (by its PID's group) while the driver talks to it: the driver gets an error, and no
    process of its group, namespace or veth of the run is left once the lab is gone."""
    import asyncio

    from emu.netns import NetnsLab
    from sw.apps.hil.launch import bridge_config, live_in_group, start_bridge
    from sw.roce.softnic.rtl_nic_driver import RtlNicDriver

    sizes = HilSizes()
    ensure_model(sizes)
    before = _netns_names()
    links_before = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.count("\n")
    with NetnsLab() as lab:
        nic, peer = lab.add_host("nic"), lab.add_host("peer")
        lab.add_link(nic, peer, ifname_a="eth0", ifname_b="eth0")
        bridge = start_bridge(nic, bridge_config(tmp_path, sizes, ifname="eth0"), 20_000.0)
        port = bridge.wait_ready()
        driver = RtlNicDriver(port)
        asyncio.run(driver.check_id())
        pgid = bridge.proc.pid
        bridge.kill()
        with pytest.raises((EOFError, OSError)):
            asyncio.run(driver.counters(("TX_FRAMES",)))
        assert live_in_group(pgid) == [], "a process of the testbench's group survived"
    assert _netns_names() == before
    assert subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.count("\n") == links_before
