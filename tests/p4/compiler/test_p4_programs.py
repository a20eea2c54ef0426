"""Whole tutorial-style programs (ours, in p4/programs) with packet-in / packet-out expectations."""

from __future__ import annotations

import collections

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw, raw

pytestmark = pytest.mark.unit


def _ip_pkt(dst: str = "10.0.2.2", ttl: int = 64, tos: int = 0, sport: int = 1234, dport: int = 80) -> Ether:
    return (Ether(dst="00:00:00:00:00:01", src="00:00:00:00:00:0a") /
            IP(src="10.0.1.1", dst=dst, ttl=ttl, tos=tos) / UDP(sport=sport, dport=dport) / Raw(b"x" * 18))


def test_basic_forwarding_rewrites_macs_ttl_and_checksum(program_switch) -> None:
    sw = program_switch("basic.p4")
    sw.cmd("table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.2.2/32 => 08:00:00:00:02:22 2")
    pkt = _ip_pkt()
    out = sw.send(1, raw(pkt))
    assert [p for p, _ in out] == [2]
    got = Ether(out[0][1])
    assert got[Ether].dst == "08:00:00:00:02:22"
    assert got[Ether].src == "00:00:00:00:00:01"
    assert got[IP].ttl == 63
    expected = pkt.copy()
    expected[IP].ttl = 63
    expected[Ether].src, expected[Ether].dst = "00:00:00:00:00:01", "08:00:00:00:02:22"
    del expected[IP].chksum
    assert out[0][1] == raw(Ether(raw(expected)))  # checksum recomputed exactly as the kernel/scapy does


def test_basic_lpm_longest_prefix_wins_and_miss_drops(program_switch) -> None:
    sw = program_switch("basic.p4")
    sw.cmd("table_add ipv4_lpm ipv4_forward 10.0.0.0/8 => 00:00:00:00:00:08 8",
           "table_add ipv4_lpm ipv4_forward 10.0.2.0/24 => 00:00:00:00:00:18 24")
    assert sw.send(1, raw(_ip_pkt("10.0.2.9")))[0][0] == 24
    assert sw.send(1, raw(_ip_pkt("10.9.9.9")))[0][0] == 8
    assert sw.send(1, raw(_ip_pkt("192.168.0.1"))) == []
    assert sw.pipe.drops["egress_spec=511 (mark_to_drop)"] == 1


def test_basic_non_ipv4_goes_to_port_0_like_bmv2(program_switch) -> None:
    # egress_spec never set -> BMv2 sends to port 0; the frame leaves unchanged
    sw = program_switch("basic.p4")
    frame = raw(Ether(dst="ff:ff:ff:ff:ff:ff", src="00:00:00:00:00:0a", type=0x88B5) / Raw(b"abc" * 20))
    assert sw.send(3, frame) == [(0, frame)]


def test_ecn_marks_only_ect_packets_above_threshold(program_switch) -> None:
    sw = program_switch("ecn.p4")
    sw.cmd("table_add ipv4_lpm ipv4_forward 10.0.2.2/32 => 08:00:00:00:02:22 2")
    qp = sw.pipe.ingress(1, raw(_ip_pkt(tos=0x01))).queued[0]       # ECT(1)
    shallow = sw.pipe.egress(qp, enq_qdepth=9).out[0][1]
    assert Ether(shallow)[IP].tos & 3 == 1
    qp = sw.pipe.ingress(1, raw(_ip_pkt(tos=0x02))).queued[0]       # ECT(0)
    deep = Ether(sw.pipe.egress(qp, enq_qdepth=10).out[0][1])
    assert deep[IP].tos & 3 == 3
    assert deep[IP].chksum == IP(raw(deep[IP].copy().__class__(raw(deep[IP])))).chksum
    check = deep[IP].copy()
    del check.chksum
    assert IP(raw(check)).chksum == deep[IP].chksum
    qp = sw.pipe.ingress(1, raw(_ip_pkt(tos=0x00))).queued[0]       # not ECN-capable
    assert Ether(sw.pipe.egress(qp, enq_qdepth=50).out[0][1])[IP].tos & 3 == 0


def test_ecmp_spreads_flows_and_keeps_each_flow_on_one_path(program_switch) -> None:
    sw = program_switch("ecmp.p4")
    sw.cmd("table_add ecmp_group set_ecmp_select 10.0.0.1/32 => 0 4")
    for i in range(4):
        sw.cmd(f"table_add ecmp_nhop set_nhop {i} => 00:00:00:00:01:0{i} {i + 2}")
    for port in range(2, 6):
        sw.cmd(f"table_add send_frame rewrite_mac {port} => 00:aa:00:00:00:0{port}")
    ports = collections.Counter()
    for i in range(400):
        pkt = (Ether() / IP(src=f"10.0.3.{i % 200}", dst="10.0.0.1") / TCP(sport=1000 + 7 * i, dport=80 + i % 3))
        out1 = sw.send(1, raw(pkt))
        out2 = sw.send(1, raw(pkt))
        assert len(out1) == 1 and out1[0][0] == out2[0][0]
        port, frame = out1[0]
        e = Ether(frame)
        assert e.src == f"00:aa:00:00:00:0{port}" and e.dst == f"00:00:00:00:01:0{port - 2}"
        ports[port] += 1
    assert set(ports) == {2, 3, 4, 5}
    assert min(ports.values()) > 60  # 400 flows over 4 paths


def test_ecmp_hash_is_bmv2_crc16_of_the_five_tuple(program_switch) -> None:
    from p4 import algorithms

    sw = program_switch("ecmp.p4")
    sw.cmd("table_add ecmp_group set_ecmp_select 10.0.0.1/32 => 0 4")
    for i in range(4):
        sw.cmd(f"table_add ecmp_nhop set_nhop {i} => 00:00:00:00:01:0{i} {i + 2}")
    pkt = Ether() / IP(src="10.0.3.3", dst="10.0.0.1") / UDP(sport=4791, dport=4791)
    data = bytes([10, 0, 3, 3, 10, 0, 0, 1, 17]) + (4791).to_bytes(2, "big") * 2
    want = algorithms.crc16(data) % 4
    assert sw.send(1, raw(pkt))[0][0] == want + 2


def test_multicast_floods_to_group_minus_ingress_port_in_port_order(program_switch) -> None:
    sw = program_switch("multicast.p4")
    sw.cmd("mc_mgrp_create 1", "mc_node_create 0 4 1 2 3", "mc_node_associate 1 0",
           "table_add mac_lookup forward 00:00:00:00:00:02 => 2")
    frame = raw(Ether(dst="ff:ff:ff:ff:ff:ff", src="00:00:00:00:00:01") / Raw(b"q" * 46))
    out = sw.send(1, frame)
    assert [p for p, _ in out] == [2, 3, 4]
    assert all(f == frame for _, f in out)
    known = raw(Ether(dst="00:00:00:00:00:02", src="00:00:00:00:00:01") / Raw(b"q" * 46))
    assert sw.send(1, known) == [(2, known)]


@pytest.mark.parametrize("program, commands", [
    ("basic.p4", ["table_add ipv4_lpm ipv4_forward 10.0.0.0/8 => 00:00:00:00:00:02 2"]),
    ("ecmp.p4", ["table_add ecmp_group set_ecmp_select 10.0.0.0/8 => 0 2", "table_add ecmp_nhop set_nhop 0 => 1 3",
                 "table_add ecmp_nhop set_nhop 1 => 2 4", "table_add send_frame rewrite_mac 3 => 5"]),
    ("multicast.p4", ["mc_mgrp_create 1", "mc_node_create 0 1 2 3", "mc_node_associate 1 0",
                      "table_add mac_lookup forward 00:00:00:00:00:02 => 2"]),
    ("flow_cache.p4", ["table_add ipv4_lpm ipv4_forward 10.0.0.0/8 => 00:00:00:00:00:02 2"]),
])
def test_batch_mode_matches_per_packet_processing(program_switch, program: str, commands: list[str]) -> None:
    import random

    rng = random.Random(4)
    frames = []
    for i in range(300):
        dst = rng.choice(["10.0.0.9", "10.1.2.3", "192.168.0.1"])
        mac = rng.choice(["00:00:00:00:00:02", "ff:ff:ff:ff:ff:ff"])
        pkt = Ether(dst=mac) / IP(dst=dst, src=f"10.9.0.{i % 250}") / UDP(sport=i, dport=4791) / b"p"
        frames.append((rng.randrange(1, 4), raw(pkt)[: rng.choice([200, 200, 30, 16])]))
    one, many = program_switch(program), program_switch(program)
    one.cmd(*commands)
    many.cmd(*commands)
    expected = [o for port, f in frames for o in one.pipe.process(port, f)[0]]
    assert many.pipe.process_batch(frames) == expected
    assert many.pipe.drops == one.pipe.drops and many.pipe.parser_errors == one.pipe.parser_errors
