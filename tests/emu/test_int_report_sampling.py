"""Host-mode INT reports for operations telemetry, offline on the embedded target: the sink leaf reports one INT
packet in N per flow to the collector port (an egress clone that carries the hop toward the host) while every
original keeps its stack for the receiver (HPCC); INT echoes are not reported; the collector's decoder
(``emu.int_collect.report_rows``, the one INT codec underneath) turns a report into hop rows; tshark reads the
report frame with consistent lengths."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from emu.control_plane import OPS_INT_REPORT_EVERY, IntConfig, switch_commands
from emu.int_collect import report_rows
from p4.compiler import compile_file
from p4.pipeline import Pipeline
from p4.runtime_cli import RuntimeCLI
from sw.clock import ManualClock
from sw.collectives.fabric_topology import Topology, TopologySpec
from sw.roce import Flow, FlowTemplates, Opcode, decode
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.int_md import DSCP_INT, IntHopRecord, carries_int, insert_int, parse_int, strip_int
from sw.units.pcap_file import write_pcap

pytestmark = pytest.mark.unit

FABRIC_P4 = Path(__file__).resolve().parents[2] / "p4" / "programs" / "fabric.p4"
TOPO = Topology(TopologySpec(servers=2, gpus_per_server=2, spines=2))
COLLECTOR_PORT = 9
NODES = {sw.device_id: sw.name for sw in TOPO.switches}
TSHARK = shutil.which("tshark")


def _leaf(name: str, every: int | None) -> Pipeline:
    pipe = Pipeline(compile_file(FABRIC_P4), clock=ManualClock(start_ns=1_000_000),
                    device_id=TOPO.switch(name).device_id)
    cli = RuntimeCLI(pipe)
    for line in switch_commands(TOPO, name, None, IntConfig(sink_mode="host", collector_port=COLLECTOR_PORT,
                                                             report_every=every)):
        cli.execute(line)
    return pipe


def _write(src, dst, psn: int, src_qpn: int = 0x11) -> bytes:
    flow = Flow(src.mac, src.gateway_mac, src.ip, dst.ip, src_qpn, 0x22)
    return FlowTemplates(flow)[Opcode.RDMA_WRITE_ONLY].build(psn, b"x" * 200,
                                                              ext=HeaderFields(va=0x1000, rkey=5, dma_len=200))


def test_host_mode_reports_one_in_n_per_flow_and_every_original_keeps_its_stack():
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[0]      # one leaf: source and sink
    leaf = _leaf(a.leaf, every=4)
    to_host, reports = [], []
    for psn in range(8):
        out, _ = leaf.process(a.leaf_port, _write(a, b, psn))
        for port, frame in out:
            (to_host if port == b.leaf_port else reports).append((port, frame))
    assert len(to_host) == 8 and all(carries_int(f) for _, f in to_host)       # HPCC's stack stays
    assert [p for p, _ in reports] == [COLLECTOR_PORT] * 2                    # the 4th and the 8th
    hops, _, orig_dscp = parse_int(reports[0][1])
    assert len(hops) == 1 and orig_dscp != DSCP_INT
    assert (hops[0].ingress_port, hops[0].egress_port) == (a.leaf_port, b.leaf_port)   # the host port's hop
    assert decode(strip_int(reports[1][1])[0]).psn == 7                        # the 8th packet, intact
    rows = report_rows(reports[0][1], 123, NODES)
    assert rows == [{"t_ns": 123, "switch": a.leaf, "node_id": TOPO.switch(a.leaf).device_id, "hop": 0,
                     "ingress_port": a.leaf_port, "egress_port": b.leaf_port, "hop_latency_ns": 0, "queue_id": 0,
                     "queue_pkts": 0, "src": a.ip, "dst": b.ip, "sport": decode(strip_int(reports[0][1])[0])
                     .udp_sport, "dport": 4791, "qp": 0x22}]


def test_the_default_sampling_and_a_second_flow_count_on_their_own():
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[0]
    leaf = _leaf(a.leaf, every=None)
    n_reports = 0
    for psn in range(OPS_INT_REPORT_EVERY):
        out, _ = leaf.process(a.leaf_port, _write(a, b, psn))
        n_reports += sum(1 for port, _ in out if port == COLLECTOR_PORT)
    assert n_reports == 1
    leaf = _leaf(a.leaf, every=2)
    ports = [port for qpn in (0x11, 0x12, 0x11, 0x12) for port, _ in leaf.process(a.leaf_port,
                                                                                    _write(a, b, 1, qpn))[0]]
    assert ports.count(COLLECTOR_PORT) == 2      # each flow's second packet (their slots differ)


def test_an_int_echo_is_never_reported():
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[0]
    leaf = _leaf(a.leaf, every=1)
    flow = Flow(b.mac, b.gateway_mac, b.ip, a.ip, 0x22, 0x11)
    ack = FlowTemplates(flow)[Opcode.ACKNOWLEDGE].build(3, b"", ext=HeaderFields(syndrome=0, msn=1))
    echo = insert_int(ack, [IntHopRecord(1, 1, 2, 5, 0, 3, 99, 1000)], echo=True)
    out, _ = leaf.process(b.leaf_port, echo)
    assert [port for port, _ in out] == [a.leaf_port]


def test_report_rows_number_the_hops_from_the_first_switch():
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[0]
    hops = [IntHopRecord(9, 3, 1, 40, 0, 7, 0, 0), IntHopRecord(5, 1, 3, 2, 0, 0, 0, 0)]   # newest first
    frame = insert_int(_write(a, b, 1), hops, echo=False, remaining_hop_cnt=2)
    rows = report_rows(frame, 5, {5: "p0l0", 9: "sp1"})
    assert [(r["hop"], r["switch"], r["hop_latency_ns"], r["queue_pkts"]) for r in rows] == [
        (0, "p0l0", 2000, 0), (1, "sp1", 40_000, 7)]


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_tshark_reads_the_report_frame_with_consistent_lengths(tmp_path):
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[0]
    leaf = _leaf(a.leaf, every=1)
    out, _ = leaf.process(a.leaf_port, _write(a, b, 1))
    report = next(f for port, f in out if port == COLLECTOR_PORT)
    pcap = tmp_path / "report.pcap"
    write_pcap(pcap, [(0, report)])
    fields = ["frame.len", "ip.len", "ip.dsfield.dscp", "ip.checksum.status", "udp.length", "udp.dstport",
              "ip.src", "ip.dst"]
    out = subprocess.run([TSHARK, "-o", "ip.check_checksum:TRUE", "-r", str(pcap), "-T", "json",
                          *[x for f in fields for x in ("-e", f)]], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    (row,) = [{k: v[0] for k, v in p["_source"]["layers"].items()} for p in json.loads(out)]
    int_bytes = parse_int(report)[1]
    assert int(row["ip.dsfield.dscp"]) == DSCP_INT and row["udp.dstport"] == "4791"
    assert row["ip.checksum.status"] == "2" or row["ip.checksum.status"] == "1"   # tshark: good (2 = unverified)
    assert int(row["ip.len"]) == int(row["frame.len"]) - 14 and int(row["udp.length"]) == int(row["ip.len"]) - 20
    assert int(row["udp.length"]) == len(strip_int(report)[0]) - 14 - 20 + int_bytes
    assert (row["ip.src"], row["ip.dst"]) == (a.ip, b.ip)
