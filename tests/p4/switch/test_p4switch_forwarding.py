"""The switch process between hosts in namespaces: forwarding, drops, ECN under a real queue, multicast,
mirroring, digests, exact tail-drop counts and pcaps checked with tshark."""

from __future__ import annotations

import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from switchlab import FEATURES_P4, host_ip, host_mac, tshark_fields

from p4.errors import CommandError
from sw.units.pcap_file import read_pcap

pytestmark = pytest.mark.emu

SWITCH_MAC = "02:00:00:00:00:fe"
ROUTES = "\n".join(f"table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward {host_ip(i)}/32 => {host_mac(i)} {i}"
                   for i in range(1, 5)) + "\n"


def udp_frame(src: int, dst_ip: str, seq: int, *, ecn: int = 0, size: int = 100) -> bytes:
    pkt = (Ether(src=host_mac(src), dst=SWITCH_MAC) / IP(src=host_ip(src), dst=dst_ip, tos=ecn, ttl=64, id=seq)
           / UDP(sport=40000, dport=5000))
    raw = bytes(pkt)
    return raw + bytes(max(0, size - len(raw)))


def only_udp(frames: list[bytes]) -> list[bytes]:
    return [f for f in frames if len(f) >= 38 and f[12:14] == b"\x08\x00" and f[23] == 17]


@pytest.mark.parametrize("path", ["batched", "per-frame"])
def test_forwards_between_hosts_drops_without_route_and_pcaps_match(switch_lab, path) -> None:
    lab = switch_lab
    extra = ("--log-level", "trace") if path == "per-frame" else ()   # tracing takes the per-frame path
    lab.start(FEATURES_P4, *extra, commands=ROUTES)
    to_h2 = [udp_frame(1, host_ip(2), i) for i in range(20)]
    no_route = [udp_frame(1, "10.99.0.1", 100 + i) for i in range(7)]
    lab.send(1, to_h2 + no_route)
    got = only_udp(lab.recv(2, want=20))
    assert len(got) == 20
    for sent, out in zip(to_h2, got, strict=True):
        ip_in, ip_out = IP(sent[14:]), IP(out[14:])
        assert Ether(out).dst == host_mac(2) and Ether(out).src == SWITCH_MAC
        assert ip_out.ttl == ip_in.ttl - 1 and ip_out.id == ip_in.id
        assert out[34:] == sent[34:]                       # payload untouched
    stats = lab.port_stats()
    assert stats[1]["rx_pkts"] == 27 and stats[1]["pipeline_drop_pkts"] == 7
    assert stats[2]["tx_pkts"] == 20
    assert lab.recv(3, quiet_s=0.3) == []                 # nothing leaks to other ports
    assert lab.stop() == 0
    pcap_in = lab.pcap_dir / "p1_in.pcap"
    pcap_out = lab.pcap_dir / "p2_out.pcap"
    assert [f for _, f in read_pcap(pcap_in)] == to_h2 + no_route
    assert [f for _, f in read_pcap(pcap_out)] == got
    rows = tshark_fields(pcap_out, "ip.ttl", "ip.dst", "udp.dstport", "ip.checksum.status",
                         display_filter="ip", options=("-o", "ip.check_checksum:TRUE"))
    assert len(rows) == 20
    assert all(r == ["63", host_ip(2), "5000", "1"] for r in rows), rows[:3]   # 1: checksum good


def test_kernel_stack_ping_through_switch(switch_lab) -> None:
    lab = switch_lab
    for i in (1, 2):
        h = lab.hosts[i]
        h.cmd("ip", "addr", "add", f"{host_ip(i)}/24", "dev", "eth0")
        other = 3 - i
        h.cmd("ip", "route", "add", f"{host_ip(other)}/32", "dev", "eth0")
        h.cmd("ip", "neigh", "add", host_ip(other), "lladdr", SWITCH_MAC, "dev", "eth0")
    lab.start(commands=ROUTES)
    out = lab.hosts[1].cmd("ping", "-c", "3", "-i", "0.2", "-W", "2", host_ip(2), check=False)
    assert "3 received" in out, out


def test_ecn_marks_only_once_the_shaped_queue_builds(switch_lab) -> None:
    lab = switch_lab
    lab.start(commands=ROUTES)
    burst = [udp_frame(1, host_ip(2), i, ecn=2) for i in range(60)]     # ECT(0)
    lab.send(1, burst)                                                  # unshaped: queue never builds
    got = only_udp(lab.recv(2, want=60))
    assert len(got) == 60 and all(IP(f[14:]).tos & 3 == 2 for f in got)
    lab.cli("set_queue_rate 100 2")                                     # 10 ms per packet, far below the burst
    lab.send(1, burst)
    got = only_udp(lab.recv(2, want=60))
    assert len(got) == 60
    ecn = [IP(f[14:]).tos & 3 for f in got]
    assert ecn[0] == 2                                                  # first packets found an empty queue
    assert ecn.count(3) >= 30, ecn                                      # marks appear as the queue builds
    first_mark = ecn.index(3)
    assert first_mark >= 9 and all(e == 3 for e in ecn[first_mark:])   # threshold is 10 packets
    stats = lab.port_stats()
    assert stats[2]["high_water_pkts"] >= 40


def test_queue_overflow_tail_drops_are_counted_exactly(switch_lab) -> None:
    lab = switch_lab
    lab.start(commands=ROUTES + "set_queue_depth 8 2\nset_queue_rate 50 2\n")
    burst = [udp_frame(1, host_ip(2), i) for i in range(100)]
    lab.send(1, burst)
    got = only_udp(lab.recv(2, quiet_s=0.6))
    stats = lab.port_stats()
    assert stats[1]["rx_pkts"] == 100
    assert stats[2]["queue_drop_pkts"] == 100 - len(got)
    assert stats[2]["tx_pkts"] == len(got)
    assert 9 <= len(got) < 40                                   # 8 queued + 1 in service, plus any that left
    assert stats[2]["high_water_pkts"] == 8
    ids = [IP(f[14:]).id for f in got]
    assert ids == sorted(ids)                                   # FIFO: survivors leave in order


def test_multicast_replicates_to_every_member_port(switch_lab) -> None:
    lab = switch_lab
    lab.start(commands=ROUTES + "table_add MyIngress.ipv4_lpm MyIngress.multicast 239.1.1.1/32 => 7\n"
              "mc_mgrp_create 7\nmc_node_create 0 2 3 4\nmc_node_associate 7 0\n")
    frames = [udp_frame(1, "239.1.1.1", i) for i in range(5)]
    lab.send(1, frames)
    for port in (2, 3, 4):
        got = only_udp(lab.recv(port, want=5))
        assert got == frames, f"port {port}"
    assert only_udp(lab.recv(1, quiet_s=0.3)) == []


def test_clone_to_mirror_port_and_to_cpu_port(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, "--cpu-port", "64",
              commands=ROUTES + "mirroring_add 5 4\nmirroring_add 6 64\n"
              f"table_add MyIngress.mirror_dst MyIngress.mirror {host_ip(2)} => 5\n"
              f"table_add MyIngress.mirror_dst MyIngress.mirror {host_ip(3)} => 6\n")
    frames = [udp_frame(1, host_ip(2), i) for i in range(4)]
    lab.send(1, frames)
    assert len(only_udp(lab.recv(2, want=4))) == 4
    assert only_udp(lab.recv(4, want=4)) == frames            # I2E clone: the frame as it arrived
    with lab.client() as c:
        c.subscribe("packet_in")
        lab.send(1, [udp_frame(1, host_ip(3), 77)])
        ev = c.next_event(10)
        assert ev is not None and ev["event"] == "packet_in" and ev["port"] == 64
        assert bytes.fromhex(ev["frame"]) == udp_frame(1, host_ip(3), 77)
    assert len(only_udp(lab.recv(3, want=1))) == 1


def test_digest_reaches_subscribed_controller(switch_lab) -> None:
    lab = switch_lab
    lab.start(commands=ROUTES + f"table_add MyIngress.smac MyIngress.learn {host_mac(3)} =>\n")
    with lab.client() as c:
        c.subscribe("digest")
        lab.send(1, [udp_frame(1, host_ip(2), 1)])          # known source: no digest
        lab.send(3, [udp_frame(3, host_ip(2), 2)])
        ev = c.next_event(10)
        assert ev is not None and ev["event"] == "digest" and ev["receiver"] == 1
        assert list(ev["fields"].values()) == [int(host_mac(3).replace(":", ""), 16), 3]
        assert c.next_event(0.5) is None                   # exactly one


def test_byte_rate_shaper_never_sends_faster_than_the_line_rate(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, "--log-level", "trace", commands=ROUTES + "set_port_rate 2 800K\n")   # 100 kB/s
    frames = [udp_frame(1, host_ip(2), i, size=1000) for i in range(20)]                       # 10 ms each
    lab.send(1, frames)
    got = only_udp(lab.recv(2, want=20))
    assert len(got) == 20
    assert lab.stop() == 0
    times = [t for t, f in read_pcap(lab.pcap_dir / "p2_out.pcap") if f in got]
    assert len(times) == 20
    assert times[-1] - times[0] >= 19 * 10_000_000 * 0.99               # never ahead of the shaper
    log = lab.log_text()
    assert log.count("rx port 1:") >= 20 and log.count("tx port 2:") >= 20   # the per-packet trace


def test_strict_priority_queue_overtakes_a_backlog(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, "--priority-queues", "8",
              commands=ROUTES + "table_add MyIngress.prio_by_dscp MyIngress.set_priority 46 => 7\n"
              "set_queue_rate 100 2\n")
    low = [udp_frame(1, host_ip(2), i) for i in range(20)]
    high = [udp_frame(1, host_ip(2), 100 + i, ecn=46 << 2) for i in range(5)]   # DSCP EF
    lab.send(1, low + high)
    got = only_udp(lab.recv(2, want=25))
    ids = [IP(f[14:]).id for f in got]
    assert sorted(ids) == list(range(20)) + list(range(100, 105))
    assert [i for i in ids if i >= 100] == list(range(100, 105))
    last_high = max(ids.index(i) for i in range(100, 105))
    assert last_high < 15, ids                     # the EF packets jumped the queued best-effort ones
    assert [i for i in ids if i < 100] == list(range(20))


def test_queue_rates_are_in_network_time_under_time_dilation(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, commands=ROUTES + "set_queue_rate 100 2\n",      # 10 ms per packet, network time
              env={"STARPULSE_TIME_DILATION": "20"})                       # = 200 ms per packet of wall time
    frames = [udp_frame(1, host_ip(2), i) for i in range(4)]
    t0 = time.monotonic()
    lab.send(1, frames)
    got = only_udp(lab.recv(2, want=4))
    wall_s = time.monotonic() - t0
    assert len(got) == 4
    assert wall_s >= 3 * 0.200 * 0.99                  # the shaper ran 20x slower in wall time ...
    assert lab.stop() == 0
    times = [t for t, f in read_pcap(lab.pcap_dir / "p2_out.pcap") if f in got]
    assert times[-1] - times[0] >= 3 * 10_000_000 * 0.99   # ... and 10 ms apart in (pcap) network time


def test_packet_out_from_the_controller_enters_ingress(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, "--cpu-port", "64", commands=ROUTES)
    frame = udp_frame(9, host_ip(3), 55)
    with lab.client() as c:
        c.packet_out(64, frame)
        with pytest.raises(CommandError, match="packet_out"):
            c.packet_out(64, b"\x00" * 5)
    got = only_udp(lab.recv(3, want=1))
    assert len(got) == 1 and IP(got[0][14:]).id == 55 and Ether(got[0]).dst == host_mac(3)


def test_port_stats_as_json_and_reset(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, commands=ROUTES + "set_queue_rate 1000 2\n")
    lab.send(1, [udp_frame(1, host_ip(2), i) for i in range(30)])
    assert len(only_udp(lab.recv(2, want=30))) == 30
    with lab.client() as c:
        stats = c.port_stats()
        assert stats[1]["rx_pkts"] == 30 and stats[2]["tx_pkts"] == 30 and stats[2]["iface"] == "p2"
        assert stats[2]["high_water_pkts"] >= 2 and stats[2]["qdepth_pkts"] == 0
        assert stats == lab.port_stats()                      # the text table says the same
        c.run("port_stats_reset")
        after = c.port_stats()
    assert all(after[p][k] == 0 for p in (1, 2) for k in ("rx_pkts", "tx_pkts", "high_water_pkts"))
