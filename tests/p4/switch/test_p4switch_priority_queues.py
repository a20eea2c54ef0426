"""The switch with eight priority queues, in process (no interfaces): the DSCP map picks the TM queue and INT
reports it as the hop's queue id, the shell's completion and help know the PFC and TM commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.control_plane import switch_commands
from p4.switch.pipeline_adapter import load_pipeline
from p4.switch.switch import SwitchConfig
from sw.clock import ManualClock
from sw.collectives.fabric_topology import Topology, TopologySpec
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.flow import Flow
from sw.roce.wire.int_md import parse_int
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.packets import scapy_frame
from tests.p4.switch.capture_switch import CapturingSwitch

pytestmark = pytest.mark.unit

FABRIC_P4 = Path(__file__).resolve().parents[3] / "p4" / "programs" / "fabric.p4"


@pytest.fixture(scope="module")
def leaf():
    """A one-leaf fabric switch (two servers) with eight queues; frames it sends are collected, not sent."""
    clock = ManualClock()
    topo = Topology(TopologySpec(servers=2, gpus_per_server=1, spines=0))
    name = topo.switches[0].name
    sw = CapturingSwitch(load_pipeline(FABRIC_P4, clock=clock), SwitchConfig(interfaces=[], priority_levels=8), clock)
    for cmd in switch_commands(topo, name):
        sw.execute(cmd)
    yield sw, topo, sw.sent, clock
    sw.close()


def _roce_frame(topo: Topology, dscp: int) -> bytes:
    a, b = topo.nics_of(topo.servers[0])[0], topo.nics_of(topo.servers[1])[0]
    flow = Flow(a.mac, a.gateway_mac, a.ip, b.ip, 0x11, 0x22, dscp=dscp)
    return scapy_frame(flow, Opcode.RDMA_WRITE_ONLY, payload=bytes(256),
        ext=HeaderFields(va=0x1000, rkey=1, dma_len=256))


def test_dscp_class_picks_the_queue_and_int_reports_it(leaf) -> None:
    sw, topo, sent, clock = leaf
    sw.execute("pfc_dscp_map 26 3")
    sw.execute("pfc_dscp_map 34 5")
    sw.execute("set_port_rate 2 1G")                 # queued path: the frames go through the TM's queues
    out_port = topo.nics_of(topo.servers[1])[0].leaf_port
    in_port = topo.nics_of(topo.servers[0])[0].leaf_port
    for dscp in (26, 34, 10):
        sent.clear()
        sw.receive(in_port, _roce_frame(topo, dscp), clock.now_ns())
        clock.advance_ns(1_000_000)
        sw._service(clock.now_ns())
        assert [p for p, _ in sent] == [out_port]
        hops, _, orig_dscp = parse_int(sent[0][1])
        assert orig_dscp == dscp and hops[0].queue_id == {26: 3, 34: 5, 10: 0}[dscp]
    rows = {r["prio"]: r for r in sw.tm.queue_rows(out_port, clock.now_ns())}
    assert (rows[3]["deq_pkts"], rows[5]["deq_pkts"], rows[0]["deq_pkts"]) == (1, 1, 1)
    assert "queue_stats" in sw.execute("help") and "tm_scheduler" in sw.execute("help")


def test_completion_offers_pfc_and_tm_commands_and_their_words(leaf) -> None:
    sw = leaf[0]
    assert {"pfc_enable", "pfc_thresholds", "pfc_watchdog", "pfc_dscp_map", "pfc_stats"} <= set(sw.complete("pfc"))
    assert sw.complete("tm_") == ["tm_qdepth_scope", "tm_scheduler"]
    assert "table_add" in sw.complete("tab") and "pfc_enable" in sw.describe()["commands"]
    assert sw.complete("tm_scheduler ") == ["strict", "rr"]
    assert sw.complete("tm_scheduler r") == ["rr"]
    assert sw.complete("pfc_dscp_map 26 o") == ["off"]
    assert sw.complete("pfc_enable 2 ") == ["0", "1"]
    assert "FabricIngress.ipv4_lpm" in sw.complete("table_add FabricIngress.ipv4")
