"""A forced loss is reported at its place: every switch port's receive ring made tiny
(``STARPULSE_P4SWITCH_RING_BYTES``) and a burst from one NIC: ``fabric status`` shows the kernel ring drops at
the leaf port facing that NIC, ``emu.loss`` names that port as the place whose counter grew, and a reachability
check whose probes run while that leaf is stopped (SIGSTOP, so its ring fills) during a burst fails naming that
place and the fidelity verdict."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from emu.checks import check_reachability
from emu.fabric import Fabric
from emu.loss import loss_counters, loss_places, loss_summary
from p4.switch.ports import RING_BYTES_ENV
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu

BURST_DATAGRAMS = 20000
BLAST_START_S = 1.0


def test_tiny_ring_burst_is_reported_at_the_leaf_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RING_BYTES_ENV, "4096")      # two frames per port ring
    fab = Fabric(TopologySpec(servers=2, gpus_per_server=1, spines=1))
    try:
        fab.up()
        src, dst = fab.topo.nics[0], fab.topo.nics[1]
        before = loss_counters(fab)
        fab.net.hosts[src.server].cmd(
            f"{sys.executable} -m emu.probe --blast {BURST_DATAGRAMS} --pps 1e9 --size 64 "
            f"--src {src.ip} --dst {dst.ip} --port 9 2>&1")
        places = loss_places(before, loss_counters(fab))
        status = fab.status()
        blast = fab.net.hosts[src.server].popen(
            [sys.executable, "-m", "emu.probe", "--blast", "100000000", "--pps", "1e9", "--size", "64",
             "--src", src.ip, "--dst", dst.ip, "--port", "9"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        leaf_pid = fab.net.switches[src.leaf].proc.pid
        probe = fab.probe

        def probe_with_leaf_stopped(*args, **kwargs):
            os.kill(leaf_pid, signal.SIGSTOP)
            try:
                return probe(*args, **kwargs)
            finally:
                os.kill(leaf_pid, signal.SIGCONT)     # the check reads the counters after its probes

        monkeypatch.setattr(fab, "probe", probe_with_leaf_stopped)
        try:
            time.sleep(BLAST_START_S)
            reach, _ = check_reachability(fab, retries=0)
        finally:
            os.kill(leaf_pid, signal.SIGCONT)
            blast.kill()
            blast.wait()
    finally:
        fab.down()
    place = f"{src.leaf} port {src.leaf_port} rx_kernel_drops"
    assert places.get(place, 0) > 0, places
    assert place in loss_summary(places, {"ok": True})
    port = status["switches"][src.leaf]["ports"][str(src.leaf_port)]
    assert port["rx_kernel_drops"] > 0 and status["totals"]["rx_kernel_drops"] >= port["rx_kernel_drops"]
    assert set(status["hosts"]) == {"s0", "s1"}
    assert set(status["hosts"][src.server]["nics"]) == {src.ifname}
    assert not reach.ok, reach.detail             # its leaf stopped: no probe answered, its ring overflowed
    assert "lost at: " in reach.detail and place in reach.detail and "fidelity" in reach.detail, reach.detail
    assert reach.data["loss_places"].get(place, 0) > 0 and "ok" in reach.data["fidelity"]
