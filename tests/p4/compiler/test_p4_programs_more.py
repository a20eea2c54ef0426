"""More tutorial-style programs: tunnel, calculator, source routing, MRI, firewall, QoS, flow cache, probes."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw, raw

pytestmark = pytest.mark.unit

ETH = bytes.fromhex("000000000002" "000000000001")


def _ip_ok(frame: bytes, offset: int = 14) -> bool:
    ip = IP(frame[offset:])
    fixed = ip.copy()
    del fixed.chksum
    return IP(raw(fixed)).chksum == ip.chksum


def test_tunnel_encap_transit_and_decap(program_switch) -> None:
    sw = program_switch("tunnel.p4")
    sw.cmd("table_add ipv4_lpm encap 10.0.3.0/24 => 3",
           "table_add myTunnel_exact myTunnel_forward 3 => 5",
           "table_add myTunnel_exact myTunnel_egress 4 => 6")
    ip = raw(IP(src="10.0.1.1", dst="10.0.3.3", ttl=9) / UDP(sport=1, dport=2) / b"data")
    (port, out), = sw.send(1, ETH + b"\x08\x00" + ip)
    assert port == 5 and out == ETH + b"\x12\x12" + b"\x08\x00\x00\x03" + ip   # encapsulated, IP untouched
    (port, out), = sw.send(2, ETH + b"\x12\x12" + b"\x08\x00\x00\x04" + ip)
    assert port == 6 and out == ETH + b"\x08\x00" + ip                         # decapsulated
    assert sw.send(2, ETH + b"\x12\x12" + b"\x08\x00\x00\x09" + ip) == []       # unknown tunnel id


@pytest.mark.parametrize("op, a, b, want", [
    ("+", 7, 5, 12), ("-", 5, 7, (5 - 7) & 0xFFFFFFFF), ("&", 0xF0F0, 0xFF00, 0xF000),
    ("|", 0xF0, 0x0F, 0xFF), ("^", 0xFF, 0x0F, 0xF0)])
def test_calculator_replies_on_ingress_port(program_switch, op: str, a: int, b: int, want: int) -> None:
    sw = program_switch("calc.p4")
    req = ETH + b"\x12\x34" + b"P4\x01" + op.encode() + struct.pack("!III", a, b, 0)
    (port, out), = sw.send(4, req)
    assert port == 4
    assert out[:12] == ETH[6:] + ETH[:6]                  # MACs swapped
    assert struct.unpack("!I", out[14 + 12:14 + 16])[0] == want


def test_calculator_drops_unknown_op_and_bad_magic(program_switch) -> None:
    sw = program_switch("calc.p4")
    assert sw.send(1, ETH + b"\x12\x34" + b"P4\x01" + b"*" + bytes(12)) == []
    assert sw.send(1, ETH + b"\x12\x34" + b"Q4\x01" + b"+" + bytes(12)) == []


def test_source_routing_three_hops(program_switch) -> None:
    sw = program_switch("source_routing.p4")
    ip = raw(IP(src="10.0.1.1", dst="10.0.2.2", ttl=20) / UDP() / b"x")
    hops = [(0, 2), (0, 3), (1, 1)]
    frame = ETH + b"\x12\x34" + b"".join(struct.pack("!H", (bos << 15) | port) for bos, port in hops) + ip
    for expected_port in (2, 3, 1):
        (port, frame), = sw.send(9, frame)
        assert port == expected_port
    assert frame[12:14] == b"\x08\x00"                   # last hop restored IPv4
    assert IP(frame[14:]).ttl == 17 and IP(frame[14:]).dst == "10.0.2.2"   # every hop parses IPv4
    assert sw.send(9, ETH + b"\x08\x00" + ip) == []       # no source route: dropped


def test_mri_appends_switch_id_and_queue_depth_per_hop(program_switch) -> None:
    switches = []
    for swid in (1, 2):
        sw = program_switch("mri.p4")
        sw.cmd("table_add ipv4_lpm ipv4_forward 10.0.2.2/32 => 00:00:00:00:02:02 2",
               f"table_set_default swtrace add_swtrace {swid}")
        switches.append(sw)
    # IPv4 with an MRI option: option 31, length 4, count 0 (+ 2 padding bytes in our option word)
    option = bytes([0x1F, 4]) + b"\x00\x00"
    pkt = IP(src="10.0.1.1", dst="10.0.2.2", ihl=6, options=[], ttl=64) / UDP(sport=1, dport=2) / b"mri"
    ip = bytearray(raw(pkt))
    ip = bytes(ip[:20]) + option + bytes(ip[20:])
    ipl = IP(ip[:20])
    ipl.len = len(ip)
    ipl.ihl = 6
    del ipl.chksum
    ip = raw(ipl)[:20] + ip[20:]
    frame = ETH + b"\x08\x00" + ip
    for depth, sw in zip((3, 7), switches, strict=True):
        qp = sw.pipe.ingress(1, frame).queued[0]
        (port, frame), = sw.pipe.egress(qp, deq_qdepth=depth).out
        assert port == 2
    got = IP(frame[14:])
    assert got.ihl == 6 + 4 and got.len == len(ip) + 16   # (checksum covers the base header only)
    count = struct.unpack("!H", frame[14 + 22:14 + 24])[0]
    traces = [struct.unpack("!II", frame[14 + 24 + 8 * i:14 + 32 + 8 * i]) for i in range(count)]
    assert count == 2 and traces == [(2, 7), (1, 3)]      # newest first, as pushed


def test_firewall_admits_only_replies_to_inside_connections(program_switch) -> None:
    sw = program_switch("firewall.p4")
    sw.cmd("table_add ipv4_lpm ipv4_forward 10.0.1.1/32 => 00:00:00:00:01:01 1",
           "table_add ipv4_lpm ipv4_forward 10.0.3.3/32 => 00:00:00:00:03:03 3",
           "table_add check_ports set_direction 1 3 => 0",    # inside (port 1) -> outside (port 3)
           "table_add check_ports set_direction 3 1 => 1")    # outside -> inside
    def tcp(src: str, dst: str, sport: int, dport: int, flags: str) -> bytes:
        return raw(Ether() / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags=flags))
    assert sw.send(3, tcp("10.0.3.3", "10.0.1.1", 80, 5555, "S")) == []           # unsolicited: blocked
    assert [p for p, _ in sw.send(1, tcp("10.0.1.1", "10.0.3.3", 5555, 80, "S"))] == [3]
    assert [p for p, _ in sw.send(3, tcp("10.0.3.3", "10.0.1.1", 80, 5555, "SA"))] == [1]
    assert sw.send(3, tcp("10.0.3.3", "10.0.1.1", 80, 6666, "A")) == []            # other flow: blocked


def test_qos_marks_dscp_keeps_ecn_and_sets_priority(program_switch) -> None:
    sw = program_switch("qos.p4")
    sw.cmd("table_add ipv4_lpm ipv4_forward 10.0.2.0/24 => 00:00:00:00:02:02 2")
    cases = [(UDP(sport=1, dport=2), 46, 7), (TCP(sport=1, dport=2), 10, 3)]
    for l4, dscp, prio in cases:
        frame = raw(Ether() / IP(src="10.0.1.1", dst="10.0.2.2", tos=0x01) / l4)
        qp = sw.pipe.ingress(1, frame).queued[0]
        assert qp.priority == prio
        (port, out), = sw.pipe.egress(qp).out
        assert IP(out[14:]).tos == (dscp << 2) | 1 and _ip_ok(out)


def test_flow_cache_reports_misses_then_uses_installed_entry(program_switch) -> None:
    sw = program_switch("flow_cache.p4")
    sw.cmd("table_add ipv4_lpm ipv4_forward 10.0.2.0/24 => 00:00:00:00:02:02 2")
    frame = raw(Ether() / IP(src="10.0.1.1", dst="10.0.2.2", proto=17) / UDP(sport=4000, dport=4791) / b"z")
    assert [p for p, _ in sw.send(1, frame)] == [2]
    (d,) = sw.last.digests
    assert d.name == "flow_digest_t" and d.fields == {
        "srcAddr": 0x0A000101, "dstAddr": 0x0A000202, "protocol": 17, "srcPort": 4000, "dstPort": 4791,
        "ingress_port": 1}
    f = d.fields
    (msg,) = sw.cmd(f"table_add flow_cache cached_forward {f['srcAddr']} {f['dstAddr']} {f['protocol']} "
                    f"{f['srcPort']} {f['dstPort']} => 00:00:00:00:09:09 9")
    handle = msg.split()[-1]
    for _ in range(3):
        assert [p for p, _ in sw.send(1, frame)] == [9]
        assert sw.last.digests == []
    assert sw.cmd(f"counter_read flow_counter {handle}")[0].endswith(f"(packets=3, bytes={3 * len(frame)})")


def test_link_monitor_probe_collects_bytes_and_times(program_switch) -> None:
    sw = program_switch("link_monitor.p4")
    sw.cmd("table_add ipv4_lpm ipv4_forward 10.0.2.2/32 => 00:00:00:00:02:02 2",
           "table_set_default swid set_swid 5")
    data = raw(Ether() / IP(src="10.0.1.1", dst="10.0.2.2") / UDP() / Raw(b"d" * 58))
    sw.clock.advance_ns(1_000_000)
    for _ in range(4):
        sw.send(1, data)
    sw.clock.advance_ns(2_000_000)
    probe = ETH + b"\x08\x12" + b"\x00" + bytes([2]) + bytes([3])   # hop_cnt 0, route: port 2 then 3
    (port, out), = sw.send(1, probe)
    assert port == 2
    hop_cnt = out[14]
    bos_swid, eport, byte_cnt = out[15], out[16], struct.unpack("!I", out[17:21])[0]
    last_time = int.from_bytes(out[21:27], "big")
    cur_time = int.from_bytes(out[27:33], "big")
    assert hop_cnt == 1 and bos_swid == 0x80 | 5 and eport == 2
    assert byte_cnt == 4 * len(data) + len(probe)
    assert (last_time, cur_time) == (0, 3000)   # µs: first probe on this port, at t = 3 ms
