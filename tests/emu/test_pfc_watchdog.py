"""PFC storm protection in the fabric: a host that never drains keeps pausing its leaf port; the leaf's watchdog
trips within its bound (counted per link in `fabric status`, logged), traffic to the host still gets through,
and once the host stops pausing the fabric forwards as before."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from emu.fabric import Fabric, PfcSettings
from emu.traffic import stop_proc
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]
WATCHDOG_MS = 50
# The stuck host: a full-quanta pause every 10 ms (wall), forever (until the test stops it).
STORM = """
import socket, sys, time
from sw.units.pfc_frame import build_pfc_frame
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((sys.argv[1], 0))
frame = build_pfc_frame(s.getsockname()[4], {0: 0xFFFF})
print("storming", flush=True)
while True:
    s.send(frame)
    time.sleep(0.01)
"""


def test_watchdog_trips_on_a_host_that_never_drains_and_the_fabric_recovers() -> None:
    fab = Fabric(TopologySpec(servers=3, gpus_per_server=1, spines=0),
                 pfc=PfcSettings(True, watchdog_ms=WATCHDOG_MS))
    with fab:
        src, stuck = fab.topo.nics[0], fab.topo.nics[2]
        storm = fab.net.hosts[stuck.server].popen([sys.executable, "-c", STORM, stuck.ifname], cwd=str(REPO),
                                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        fab.helper_procs.append(storm)
        try:
            assert storm.stdout.readline().strip() == "storming"
            during = fab.probe([(src.ip, stuck.ip)], timeout_ms=1000, retries=4)
            status = fab.status()
        finally:
            stop_proc(storm)
        after = fab.probe([(src.ip, stuck.ip), (stuck.ip, src.ip)])
        status_after = fab.status()
        log = (fab.workdir / f"{stuck.leaf}.log").read_text()
    link = next(lk for lk in status["links"] if lk["link"] == f"{stuck.server}:{stuck.leaf}")
    leaf_port = link["b_to_a"]                           # the leaf port facing the stuck host
    assert leaf_port["pfc_pauses_rx"] > 0 and leaf_port["pfc_watchdog_trips"] >= 1
    assert status["pfc"]["totals"]["pfc_watchdog_trips"] >= 1
    assert all(r["ok"] for r in during), during          # the watchdog let traffic through the storm
    assert all(r["ok"] for r in after), after
    port = status_after["switches"][stuck.leaf]["ports"][str(stuck.leaf_port)]
    assert port["qdepth_pkts"] == 0
    assert f"PFC watchdog: port {stuck.leaf_port} priority 0" in log
