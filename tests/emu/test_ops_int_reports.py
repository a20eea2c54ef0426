"""INT reports into the operations store on a live fabric (2 servers x 2 rails, one spine, ops on, host mode): a
paced UDP stream to the RoCE port across rails (leaf, spine, leaf) reaches its receiver with its whole INT stack
on every packet (what HPCC echoes), while the far leaf clones one packet in ``OPS_INT_REPORT_EVERY`` to the
collector host, whose ``emu.int_collect`` stores three hop rows per report in the run's store; tshark reads the
report frames the leaf sent to its collector port.  About 30 s (dilation 4: fidelity is not what it checks)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from emu.control_plane import OPS_INT_REPORT_EVERY
from emu.fabric import Fabric, collector_port
from emu.traffic import send_through

pytestmark = pytest.mark.emu

PACKETS = 3 * OPS_INT_REPORT_EVERY
TSHARK = shutil.which("tshark")


def test_the_store_gets_the_sampled_hops_and_the_receiver_keeps_every_stack(tmp_path: Path) -> None:
    pcaps = tmp_path / "pcap"
    with Fabric(servers=2, gpus_per_server=2, spines=1, ops=True, time_dilation=4, pcap_dir=str(pcaps)) as fab:
        src, dst = fab.topo.nics_of("s0")[0], fab.topo.nics_of("s1")[1]       # rail 0 -> rail 1: via sp0
        rows, _ = send_through(fab, src.ip, dst.ip, packets=PACKETS, pps=1000, payload_bytes=200)
        assert len(rows) == PACKETS and {r[1] for r in rows} == {3}             # 3 INT hops on every packet
        store = fab.collector.store
        hops: list[dict] = []
        for _ in range(40):                 # the collector writes a batch every 0.5 s of wall time
            hops = store.int_hops()
            if len(hops) >= 9:
                break
            fab.clock.sleep_ns(fab.clock.net_duration_ns(250e6))
        collector = fab.collector
        cport = collector_port(fab.topo)
    assert collector.int_summary["reports"] == 3 and collector.int_summary["drops"] == {}
    assert len(hops) == 9
    assert [h["switch"] for h in sorted(hops, key=lambda h: (h["t_ns"], h["hop"]))[:3]] == ["p0l0", "sp0", "p0l1"]
    assert {(h["src"], h["dst"], h["dport"]) for h in hops} == {(src.ip, dst.ip, 4791)}
    last = [h for h in hops if h["switch"] == "p0l1"]
    assert {h["egress_port"] for h in last} == {dst.leaf_port}      # the sink's hop is the host port's
    assert all(h["hop_latency_ns"] % 1000 == 0 and h["hop_latency_ns"] >= 0 for h in hops)
    if TSHARK is None:
        pytest.skip("tshark is not installed: the report frames were not dissected")
    pcap = pcaps / f"p0l1-eth{cport}_out.pcap"
    out = subprocess.run([TSHARK, "-r", str(pcap), "-T", "json", "-e", "ip.dsfield.dscp", "-e", "udp.dstport",
                          "-e", "ip.src", "-e", "ip.dst", "-e", "ip.len", "-e", "frame.len"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    frames = [{k: v[0] for k, v in p["_source"]["layers"].items()} for p in json.loads(out)]
    assert len(frames) == 3
    for f in frames:
        assert (int(f["ip.dsfield.dscp"]), f["udp.dstport"], f["ip.src"], f["ip.dst"]) == (0x17, "4791", src.ip,
                                                                                             dst.ip)
        assert int(f["ip.len"]) == int(f["frame.len"]) - 14
