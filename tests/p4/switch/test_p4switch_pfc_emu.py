"""PFC in the running switch between namespaces: lossless incast by pausing the senders (frames decoded by tshark),
tail drops with PFC off, a host's pause holding its port until XON, and the watchdog freeing a stuck port."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from switchlab import FEATURES_P4, host_ip, host_mac, tshark_fields

from sw.units.pfc_frame import build_pfc_frame, parse_pfc_frame

pytestmark = pytest.mark.emu

SWITCH_MAC = "02:00:00:00:00:fe"
ROUTES = "\n".join(f"table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward {host_ip(i)}/32 => {host_mac(i)} {i}"
                   for i in range(1, 5)) + "\n"
FRAMES_PER_SENDER = 60
FRAME_BYTES = 1000


def udp_frame(src: int, dst: int, seq: int) -> bytes:
    raw = bytes(Ether(src=host_mac(src), dst=SWITCH_MAC) / IP(src=host_ip(src), dst=host_ip(dst), id=seq)
                / UDP(sport=40000 + src, dport=5000))
    return raw + bytes(FRAME_BYTES - len(raw))


def only_udp(frames: list[bytes]) -> list[bytes]:
    return [f for f in frames if len(f) > 23 and f[12:14] == b"\x08\x00" and f[23] == 17]


def pfc_frames(frames: list[bytes]) -> list[dict[int, int]]:
    return [q for q in (parse_pfc_frame(f) for f in frames) if q is not None]


def incast_commands(pfc: bool, depth_pkts: int) -> str:
    cmds = ROUTES + f"set_queue_depth {depth_pkts}\nset_port_rate 3 5M\n"
    if pfc:
        for port in (1, 2, 3):
            cmds += f"pfc_enable {port} 1\npfc_thresholds {port} 8000 4000 100000\n"
    return cmds


def test_incast_with_pfc_is_lossless_and_pauses_the_senders(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, commands=incast_commands(True, 1000))
    frames = {src: [udp_frame(src, 3, i) for i in range(FRAMES_PER_SENDER)] for src in (1, 2)}
    for i in range(FRAMES_PER_SENDER):                  # 2 -> 1 into a 5 Mb/s port
        lab.send(1, frames[1][i:i + 1])
        lab.send(2, frames[2][i:i + 1])
    got = only_udp(lab.recv(3, want=2 * FRAMES_PER_SENDER))
    assert len(got) == 2 * FRAMES_PER_SENDER
    at_senders = {i: pfc_frames(lab.recv(i, quiet_s=0.3)) for i in (1, 2)}
    stats = lab.port_stats()
    assert lab.stop() == 0
    for i in (1, 2):
        assert at_senders[i] and at_senders[i][0] == {0: 0xFFFF} and at_senders[i][-1] == {0: 0}  # XOFF, XON
        assert stats[i]["pfc_pauses_sent"] >= 1 and stats[i]["pfc_xoff_events"] >= 1
        assert stats[i]["pfc_headroom_drop_pkts"] == 0
    assert sum(s["queue_drop_pkts"] for s in stats.values()) == 0
    rows = tshark_fields(lab.pcap_dir / "p1_out.pcap", "eth.dst", "macc.opcode", "macc.cbfc.enbv",
                         "macc.cbfc.pause_time.c0", display_filter="macc")
    assert rows[0] == ["01:80:c2:00:00:01", "0x0101", "0x0001", "65535"] and rows[-1][3] == "0"


def test_incast_without_pfc_drops(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, commands=incast_commands(False, 16))
    frames = {src: [udp_frame(src, 3, i) for i in range(FRAMES_PER_SENDER)] for src in (1, 2)}
    for i in range(FRAMES_PER_SENDER):                  # 2 -> 1 into a 5 Mb/s port
        lab.send(1, frames[1][i:i + 1])
        lab.send(2, frames[2][i:i + 1])
    got = only_udp(lab.recv(3, quiet_s=1.0))
    stats = lab.port_stats()
    assert lab.stop() == 0
    assert stats[3]["queue_drop_pkts"] > 0 and len(got) + stats[3]["queue_drop_pkts"] == 2 * FRAMES_PER_SENDER
    assert stats[1]["pfc_pauses_sent"] == 0 and pfc_frames(lab.recv(1, quiet_s=0.2)) == []


def test_host_pause_holds_its_port_until_xon(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, commands=ROUTES + "set_port_rate 3 10M\npfc_enable 3 1\n")
    lab.send(3, [build_pfc_frame(bytes.fromhex(host_mac(3).replace(":", "")), {0: 0xFFFF})])  # 3.4 s at 10M
    lab.send(1, [udp_frame(1, 3, i) for i in range(5)])
    lab.recv(1, quiet_s=0.3)
    held = lab.port_stats()[3]
    lab.send(3, [build_pfc_frame(bytes.fromhex(host_mac(3).replace(":", "")), {0: 0})])
    got = only_udp(lab.recv(3, want=5))
    stats = lab.port_stats()[3]
    assert lab.stop() == 0
    assert held["qdepth_pkts"] == 5 and held["pfc_pauses_rx"] == 1
    assert len(got) == 5 and stats["qdepth_pkts"] == 0 and stats["pfc_paused_ns"] > 0
    assert stats["tx_pkts"] == 5          # the pause frames were consumed, not forwarded


def test_watchdog_frees_a_port_stuck_in_pause(switch_lab) -> None:
    lab = switch_lab
    lab.start(FEATURES_P4, commands=ROUTES + "set_port_rate 3 10M\npfc_enable 3 1\npfc_watchdog 3 50\n")
    lab.send(3, [build_pfc_frame(bytes.fromhex(host_mac(3).replace(":", "")), {0: 0xFFFF})])  # never an XON
    lab.send(1, [udp_frame(1, 3, i) for i in range(5)])
    got = only_udp(lab.recv(3, want=5))
    stats = lab.port_stats()[3]
    assert lab.stop() == 0
    assert len(got) == 5 and stats["pfc_watchdog_trips"] == 1
    assert "PFC watchdog: port 3 priority 0" in lab.log_text()
