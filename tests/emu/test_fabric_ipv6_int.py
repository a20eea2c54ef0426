"""RoCEv2 over IPv6 through fabric.p4 (embedded target, offline): IPv6 routes, ECN on the traffic class, INT-MD
stamped after UDP with the IPv6 payload length, UDP length and UDP checksum kept consistent (checked by tshark),
the host's strip/insert of INT over IPv6, and an RC WRITE/READ with HPCC fed by the echoed hops."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from emu.control_plane import IntConfig, switch_commands
from p4.compiler import compile_file
from p4.pipeline import Pipeline
from p4.runtime_cli import RuntimeCLI
from sw.clock import ManualClock
from sw.collectives.fabric_topology import Topology, TopologySpec
from sw.roce.softnic.loopback import LinkProfile, MemoryWire
from sw.roce.wire.fields import NO_FIELDS, HeaderFields
from sw.roce.wire.flow import Flow
from sw.roce.wire.gid import fabric_ipv6
from sw.roce.wire.int_md import (
    DSCP_INT,
    INT_HOP_BYTES,
    INT_MD_BYTES,
    INT_SHIM_BYTES,
    IntHopRecord,
    carries_int,
    insert_int,
    parse_int,
    strip_int,
)
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.template import FlowTemplates
from sw.units.pcap_file import write_pcap
from tests.sw.roce.transport.fabric_rdma import write_then_read

pytestmark = pytest.mark.unit

FABRIC_P4 = Path(__file__).resolve().parents[2] / "p4" / "programs" / "fabric.p4"
TSHARK = shutil.which("tshark")
INT_HEADER_BYTES = INT_SHIM_BYTES + INT_MD_BYTES


@pytest.fixture(scope="module")
def program():
    return compile_file(FABRIC_P4)


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology(TopologySpec(servers=2, gpus_per_server=2, spines=2))


def _switches(program, topo: Topology, clock: ManualClock, int_cfg: IntConfig | None = None) -> dict[str, Pipeline]:
    out = {}
    for sw in topo.switches:
        pipe = Pipeline(program, clock=clock, device_id=sw.device_id)
        cli = RuntimeCLI(pipe)
        for line in switch_commands(topo, sw.name, int_cfg=int_cfg):
            cli.execute(line)
        out[sw.name] = pipe
    return out


def _peer(topo: Topology, node: str, port: int) -> tuple[str, int]:
    for link in topo.links:
        if (link.a, link.a_port) == (node, port):
            return link.b, link.b_port
        if (link.b, link.b_port) == (node, port):
            return link.a, link.a_port
    raise AssertionError(f"no link at {node} port {port}")


def _route(topo: Topology, switches: dict[str, Pipeline], src_nic, frame: bytes) -> tuple[bytes, list[bytes]]:
    """Carry ``frame`` from ``src_nic`` hop by hop to a host; the frame it gets and what each link carried."""
    node, port = src_nic.leaf, src_nic.leaf_port
    on_links = []
    while node in switches:
        out, _ = switches[node].process(port, frame)
        ((egress, frame),) = out
        on_links.append(frame)
        node, port = _peer(topo, node, egress)
    return frame, on_links


def _v6_frame(topo: Topology, a, b, payload: bytes, opcode: Opcode = Opcode.RDMA_WRITE_ONLY,
              ext: HeaderFields = NO_FIELDS) -> bytes:
    flow = Flow(a.mac, a.gateway_mac, fabric_ipv6(a.ip), fabric_ipv6(b.ip), 0x11, 0x22)
    return FlowTemplates(flow)[opcode].build(7, payload, ext=ext)


def _udp_checksum_ok(frame: bytes) -> bool:
    """Scapy recomputes the IPv6 UDP checksum over the pseudo-header and the whole datagram (INT included)."""
    pkt = Ether(frame)
    wire = pkt[UDP].chksum
    del pkt[UDP].chksum
    return wire == Ether(bytes(pkt))[UDP].chksum


def test_ipv6_routes_mirror_the_ipv4_plan(topo):
    a = topo.nics_of("s0")[0]
    cmds = switch_commands(topo, a.leaf)
    v4 = [c for c in cmds if "ipv4_lpm" in c]
    v6 = [c for c in cmds if "ipv6_lpm" in c]
    assert len(v4) == len(v6) > 0
    assert f"table_add FabricIngress.ipv6_lpm forward {fabric_ipv6(a.ip)}/128 => {a.leaf_port} {a.mac}" in cmds
    assert any(c.startswith("table_add FabricIngress.int_watchlist6 int_source") for c in cmds)


@pytest.mark.parametrize("pair", ["same_leaf", "via_spine"])
def test_int_stamped_over_ipv6_with_lengths_and_udp_checksum_consistent(program, topo, pair):
    a = topo.nics_of("s0")[0]
    b = topo.nics_of("s1")[0] if pair == "same_leaf" else topo.nics_of("s1")[1]
    switches = _switches(program, topo, ManualClock(start_ns=5_000))
    sent = _v6_frame(topo, a, b, bytes(range(256)) * 3, ext=HeaderFields(va=0x1000, rkey=5, dma_len=768))
    assert _udp_checksum_ok(sent)
    got, _ = _route(topo, switches, a, sent)
    hops, int_bytes, orig_dscp = parse_int(got)
    n_hops = topo.path_switch_hops(a, b)
    assert len(hops) == n_hops and int_bytes == INT_HEADER_BYTES + n_hops * INT_HOP_BYTES
    assert carries_int(got) and orig_dscp == Ether(sent)[IPv6].tc >> 2
    assert Ether(got)[IPv6].tc >> 2 == DSCP_INT
    assert [h.node_id for h in hops][-1] == topo.switch(a.leaf).device_id  # newest first: the source leaf last
    assert len(got) == len(sent) + int_bytes
    ip6 = Ether(got)[IPv6]
    assert ip6.plen == len(got) - 14 - 40 == ip6[UDP].len
    assert ip6.hlim == Ether(sent)[IPv6].hlim - n_hops
    assert _udp_checksum_ok(got)
    # The receiving NIC's strip gives back the sender's frame, checksum and ICRC included (only MACs and the hop
    # limit changed on the way).
    plain, echoed_hops = strip_int(got)
    assert list(echoed_hops) == hops and not echoed_hops.echoed
    assert plain[14:21] == sent[14:21] and plain[22:] == sent[22:]


def test_report_mode_sink_restores_the_ipv6_frame_and_its_checksum(program, topo):
    a, b = topo.nics_of("s0")[0], topo.nics_of("s1")[1]  # leaf -> spine -> leaf: three INT hops to remove
    collector = max(topo.ports_of(b.leaf)) + 1
    switches = _switches(program, topo, ManualClock(start_ns=9_000),
                         IntConfig(sink_mode="report", collector_port=collector))
    sent = _v6_frame(topo, a, b, b"\x5a" * 1001)  # odd payload: pad bytes in the checksummed datagram
    node, port, frame = a.leaf, a.leaf_port, sent
    while node in switches:
        out, _ = switches[node].process(port, frame)
        ((egress, frame),) = [(p, f) for p, f in out if p != collector]
        node, port = _peer(topo, node, egress)
    assert not carries_int(frame)
    assert frame[14:21] == sent[14:21] and frame[22:] == sent[22:]  # UDP checksum restored bit for bit
    reports = [f for p, f in out if p == collector]
    assert len(reports) == 1 and len(parse_int(reports[0])[0]) == 3 and _udp_checksum_ok(reports[0])


def test_ecn_marks_the_ipv6_traffic_class(program, topo):
    a, b = topo.nics_of("s0")[0], topo.nics_of("s1")[0]
    leaf = Pipeline(program, clock=ManualClock(start_ns=1), device_id=topo.switch(a.leaf).device_id)
    cli = RuntimeCLI(leaf)
    for line in switch_commands(topo, a.leaf):
        if "ecn_config" not in line:
            cli.execute(line)
    cli.execute(f"table_add FabricEgress.ecn_config set_red {b.leaf_port} => 0 0 65536")  # always mark
    sent = _v6_frame(topo, a, b, b"x" * 64)
    ((_, got),), _ = leaf.process(a.leaf_port, sent)
    assert Ether(got)[IPv6].tc & 3 == 3 and _udp_checksum_ok(got)


def test_host_insert_and_strip_of_an_int_echo_over_ipv6(topo):
    a, b = topo.nics_of("s0")[0], topo.nics_of("s1")[0]
    ack = _v6_frame(topo, b, a, b"", Opcode.ACKNOWLEDGE, ext=HeaderFields(msn=3))
    hops = [IntHopRecord(7, 1, 2, 1500, 0, 12, 987654321, 4_000_000), IntHopRecord(3, 4, 1, 900, 0, 70000, 5, 6)]
    echo = insert_int(ack, hops)
    assert carries_int(echo) and _udp_checksum_ok(echo)
    ip6 = Ether(echo)[IPv6]
    assert ip6.plen == len(echo) - 54 == ip6[UDP].len and ip6.tc >> 2 == DSCP_INT
    plain, got = strip_int(echo)
    assert plain == ack and list(got) == hops and got.echoed


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_tshark_reads_the_int_stamped_ipv6_frames_consistently(program, topo, tmp_path):
    a, b = topo.nics_of("s0")[0], topo.nics_of("s1")[1]
    switches = _switches(program, topo, ManualClock(start_ns=77_000))
    frames = []
    for size in (0, 1, 256, 1000):
        sent = _v6_frame(topo, a, b, bytes(size), ext=HeaderFields(va=1, rkey=2, dma_len=size))
        _, on_links = _route(topo, switches, a, sent)
        frames.extend(on_links)  # 1, 2 and 3 hops of INT
    pcap = tmp_path / "int6.pcap"
    write_pcap(pcap, [(i * 1000, f) for i, f in enumerate(frames)])
    fields = ["frame.len", "ipv6.plen", "ipv6.nxt", "ipv6.tclass.dscp", "udp.length", "udp.checksum.status",
              "udp.dstport"]
    out = subprocess.run([TSHARK, "-o", "udp.check_checksum:TRUE", "-r", str(pcap), "-T", "json",
                          *(x for f in fields for x in ("-e", f))], capture_output=True, text=True, timeout=120,
                         check=True)
    rows = [{k: v[0] for k, v in p["_source"]["layers"].items()} for p in json.loads(out.stdout)]
    assert len(rows) == len(frames) == 12
    for row, frame in zip(rows, frames, strict=True):
        assert int(row["frame.len"]) == len(frame)
        assert int(row["ipv6.plen"]) == len(frame) - 54 == int(row["udp.length"])
        assert row["ipv6.nxt"] == "17" and row["udp.dstport"] == "4791"
        assert int(row["ipv6.tclass.dscp"]) == DSCP_INT
        assert row["udp.checksum.status"] == "1"  # tshark: "Good"


def test_write_and_read_over_ipv6_through_leaf_and_spine_with_hpcc_echo(program, topo):
    a, b = topo.nics_of("s0")[0], topo.nics_of("s1")[1]  # three switches: leaf, spine, leaf
    clock = ManualClock(start_ns=1_000_000)
    switches = _switches(program, topo, clock)

    def carry(src_nic):
        return lambda frame: _route(topo, switches, src_nic, frame)[0]

    wire = MemoryWire(clock, LinkProfile(transform=carry(a)), LinkProfile(transform=carry(b)))
    _, _, qa, qb = write_then_read(clock, wire, a, b, ip_a=fabric_ipv6(a.ip), ip_b=fabric_ipv6(b.ip), seed=6,
                                   size_bytes=40_000, cc="hpcc")
    # The responder echoed the forward path's three hops in its IPv6 ACKs; HPCC at the requester used them.
    assert qb.resp.int_echoes_sent > 0 and qa.pacer.int_echoes > 0
    nodes = [h.node_id for h in qb.resp.last_echo]  # newest first: far leaf, a spine (ECMP), near leaf
    assert len(nodes) == 3 and nodes[0] == topo.switch(b.leaf).device_id
    assert nodes[1] in {sp.device_id for sp in topo.spines} and nodes[2] == topo.switch(a.leaf).device_id
