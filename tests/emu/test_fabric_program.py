"""fabric.p4 programmed by emu.control_plane, run offline on the embedded target: routing, ECMP, ECN and INT."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.control_plane import EcnConfig, IntConfig, switch_commands
from p4.compiler import compile_file
from p4.pipeline import Pipeline
from p4.runtime_cli import RuntimeCLI
from sw.clock import ManualClock
from sw.collectives.fabric_topology import Topology, TopologySpec, switch_port_mac
from sw.roce import ECN_CE, ECN_ECT0, Flow, FlowTemplates, Opcode, decode
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.int_md import DSCP_INT, carries_int, parse_int, strip_int

pytestmark = pytest.mark.unit

FABRIC_P4 = Path(__file__).resolve().parents[2] / "p4" / "programs" / "fabric.p4"
TOPO = Topology(TopologySpec(servers=2, gpus_per_server=2, spines=2))


@pytest.fixture
def program():
    return None


def _switch(_program, name: str, ecn: EcnConfig | None = None, int_cfg: IntConfig | None = None) -> Pipeline:
    # one compiled program per switch: a compiled program owns its tables
    pipe = Pipeline(compile_file(FABRIC_P4), clock=ManualClock(start_ns=1_000_000),
                    device_id=TOPO.switch(name).device_id)
    cli = RuntimeCLI(pipe)
    for line in switch_commands(TOPO, name, ecn, int_cfg):
        cli.execute(line)
    return pipe


def _frame(src, dst, payload: bytes = b"x" * 256, src_qpn: int = 0x11, ecn: int = ECN_ECT0) -> bytes:
    flow = Flow(src.mac, src.gateway_mac, src.ip, dst.ip, src_qpn, 0x22)
    return FlowTemplates(flow)[Opcode.RDMA_WRITE_ONLY].build(7, payload, ecn=ecn,
        ext=HeaderFields(va=0x1000, rkey=5, dma_len=len(payload)))


def test_rail_local_write_crosses_one_switch_and_keeps_a_valid_icrc(program):
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[0]
    leaf = _switch(program, a.leaf)
    out, _ = leaf.process(a.leaf_port, _frame(a, b))
    assert [port for port, _ in out] == [b.leaf_port]
    frame = out[0][1]
    assert frame[0:6] == bytes.fromhex(b.mac.replace(":", ""))
    assert frame[6:12] == bytes.fromhex(switch_port_mac(TOPO.switch(a.leaf).device_id, b.leaf_port).replace(":", ""))
    assert carries_int(frame)
    hops, _, orig_dscp = parse_int(frame)
    assert [h.node_id for h in hops] == [TOPO.switch(a.leaf).device_id]
    assert (hops[0].ingress_port, hops[0].egress_port) == (a.leaf_port, b.leaf_port)
    plain, _ = strip_int(frame)
    pkt = decode(plain)  # ICRC checked: TTL and DSCP are masked, lengths restored
    assert pkt.opcode == Opcode.RDMA_WRITE_ONLY and pkt.psn == 7 and orig_dscp != DSCP_INT


def test_cross_rail_goes_leaf_spine_leaf_with_three_int_hops(program):
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[1]
    switches = {sw.name: _switch(program, sw.name) for sw in TOPO.switches}
    out, _ = switches[a.leaf].process(a.leaf_port, _frame(a, b))
    (up_port, frame), = out
    assert up_port in (TOPO.uplink_port(0), TOPO.uplink_port(1))
    spine = TOPO.spines[up_port - TOPO.uplink_port(0)]
    out, _ = switches[spine.name].process(TOPO.spine_port(0, a.rail), frame)
    (down_port, frame), = out
    assert down_port == TOPO.spine_port(0, b.rail)
    out, _ = switches[b.leaf].process(TOPO.uplink_port(TOPO.spines.index(spine)), frame)
    (host_port, frame), = out
    assert host_port == b.leaf_port
    hops, _, _ = parse_int(frame)
    assert [h.node_id for h in hops] == [TOPO.switch(b.leaf).device_id, spine.device_id,
                                         TOPO.switch(a.leaf).device_id]
    plain, _ = strip_int(frame)
    assert decode(plain).dest_qp == 0x22
    assert plain[14 + 8] == 64 - 3  # TTL: three routed hops


def test_ecmp_spreads_flows_over_both_spines(program):
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[1]
    leaf = _switch(program, a.leaf)
    ports = [leaf.process(a.leaf_port, _frame(a, b, src_qpn=q))[0][0][0] for q in range(1, 201)]
    counts = {p: ports.count(p) for p in set(ports)}
    assert set(counts) == {TOPO.uplink_port(0), TOPO.uplink_port(1)}
    assert min(counts.values()) > 60, counts


def test_red_marks_only_once_the_queue_builds(program):
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[0]
    leaf = _switch(program, a.leaf, EcnConfig(kmin=5, kmax=20, pmax=0.2), IntConfig(enabled=False))

    def ecn_after(qdepth_pkts: int) -> int:
        ing = leaf.ingress(a.leaf_port, _frame(a, b))
        res = leaf.egress(ing.queued[0], enq_qdepth=qdepth_pkts, deq_qdepth=qdepth_pkts)
        return res.out[0][1][15] & 0x3

    assert all(ecn_after(q) == ECN_ECT0 for q in (0, 3, 5))
    assert all(ecn_after(q) == ECN_CE for q in (20, 40))
    middle = [ecn_after(12) for _ in range(400)]
    fraction = middle.count(ECN_CE) / len(middle)
    expected = 0.2 * (12 - 5) / (20 - 5)
    assert abs(fraction - expected) < 0.05, (fraction, expected)
    not_ect = leaf.egress(leaf.ingress(a.leaf_port, _frame(a, b, ecn=0)).queued[0], enq_qdepth=40, deq_qdepth=40)
    assert not_ect.out[0][1][15] & 0x3 == 0


@pytest.mark.parametrize("unit", ["pkts", "bytes"])
def test_red_judges_the_queue_at_dequeue_not_at_enqueue(program, unit: str) -> None:
    """A packet that entered a deep queue which has drained by its departure is not marked, and one that found the
    queue short but leaves it deep is: RED reads deq_qdepth (in bytes: times this packet's length)."""
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[0]
    frame = _frame(a, b)
    per_pkt = 1 if unit == "pkts" else len(frame)
    ecn = EcnConfig(kmin=5 * per_pkt, kmax=20 * per_pkt, pmax=1.0, unit=unit)
    leaf = _switch(program, a.leaf, ecn, IntConfig(enabled=False))

    def ecn_after(enq_qdepth: int, deq_qdepth: int) -> int:
        res = leaf.egress(leaf.ingress(a.leaf_port, frame).queued[0], enq_qdepth=enq_qdepth, deq_qdepth=deq_qdepth)
        return res.out[0][1][15] & 0x3

    assert all(ecn_after(40, deq) == ECN_ECT0 for deq in (0, 3, 5))
    assert all(ecn_after(0, deq) == ECN_CE for deq in (20, 40))


def test_report_mode_strips_for_the_host_and_clones_to_the_collector(program):
    a, b = TOPO.nics_of("s0")[0], TOPO.nics_of("s1")[0]
    collector_port = 9
    leaf = _switch(program, a.leaf, int_cfg=IntConfig(sink_mode="report", collector_port=collector_port))
    out, _ = leaf.process(a.leaf_port, _frame(a, b))
    by_port = dict(out)
    assert set(by_port) == {b.leaf_port, collector_port}
    assert not carries_int(by_port[b.leaf_port])
    assert decode(by_port[b.leaf_port]).psn == 7
    hops, _, _ = parse_int(by_port[collector_port])
    assert len(hops) == 1


def test_no_route_is_dropped_and_counted(program):
    a = TOPO.nics_of("s0")[0]
    leaf = _switch(program, a.leaf)
    flow = Flow(a.mac, a.gateway_mac, a.ip, "192.0.2.9", 1, 2)
    out, _ = leaf.process(a.leaf_port, FlowTemplates(flow)[Opcode.SEND_ONLY].build(1, b"hi"))
    assert out == []
    reading = RuntimeCLI(leaf).execute("counter_read FabricIngress.drop_reasons 0")  # DROP_NO_ROUTE
    assert "packets=1," in reading, reading
