"""PFC in the traffic manager on a manual clock: XOFF/XON generation, headroom drops, honouring pauses, watchdog,
commands, and the frames' bytes as tshark dissects them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from p4.errors import CommandError
from p4.switch.pfc import PfcManager, port_mac
from p4.switch.tm import TrafficManager
from sw.clock import ManualClock
from sw.units.pcap_file import PcapWriter
from sw.units.pfc_frame import (
    PFC_DST_MAC,
    build_pfc_frame,
    frame_dscp,
    parse_pfc_frame,
    quanta_to_ns,
)

pytestmark = pytest.mark.unit

RATE_BPS = 1e9          # 1 Gb/s: one quantum = 512 ns


def _setup(levels: int = 1) -> tuple[TrafficManager, PfcManager, list[tuple[int, bytes, int]], ManualClock]:
    clock = ManualClock()
    tm = TrafficManager(priority_levels=levels, default_depth_pkts=1000)
    sent: list[tuple[int, bytes, int]] = []
    pfc = PfcManager(tm, lambda port, frame, now: sent.append((port, frame, now)), device_id=7)
    for port in (1, 2, 3):
        tm.set_port_rate_Bps(RATE_BPS / 8, port)
        pfc.enable(port, True)
        pfc.set_thresholds(port, 3000, 1000, 2000)
    return tm, pfc, sent, clock


def test_frame_layout_and_round_trip() -> None:
    frame = build_pfc_frame(port_mac(1, 2), {3: 0xFFFF, 5: 0})
    assert len(frame) == 60 and frame[:6] == PFC_DST_MAC and frame[12:14] == b"\x88\x08"
    assert frame[14:16] == b"\x01\x01" and frame[16:18] == b"\x00\x28"
    assert frame[18 + 2 * 3: 20 + 2 * 3] == b"\xff\xff"
    assert parse_pfc_frame(frame) == {3: 0xFFFF, 5: 0}
    assert parse_pfc_frame(frame[:14] + b"\x00\x01" + frame[16:]) is None     # 802.3x PAUSE, not PFC
    assert quanta_to_ns(0xFFFF, 1e9) == 33_553_920
    with pytest.raises(ValueError):
        build_pfc_frame(port_mac(0, 0), {8: 1})


def test_dscp_of_ipv4_ipv6_and_tagged_frames() -> None:
    ip4 = bytes(12) + b"\x08\x00" + bytes([0x45, 26 << 2]) + bytes(30)
    ip6 = bytes(12) + b"\x86\xdd" + bytes([0x60 | (46 >> 2), (46 & 3) << 6]) + bytes(40)
    tagged = bytes(12) + b"\x81\x00\x00\x05" + ip4[12:]
    assert (frame_dscp(ip4), frame_dscp(ip6), frame_dscp(tagged)) == (26, 46, 26)
    assert frame_dscp(bytes(12) + b"\x08\x06" + bytes(28)) is None


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_tshark_dissects_pfc_frames(tmp_path: Path) -> None:
    tm, pfc, sent, clock = _setup()
    for i in range(3):                           # 3000 B from port 1, priority 3: XOFF
        qp = tm.enqueue(2, i, 1000, 0, 0)
        pfc.on_enqueued(qp, 1, 3, 1000, 0)
    for qp in tm.dequeue_due(10**9):             # drains below XON: quanta 0
        pfc.on_dequeued(qp, 10**9)
    w = PcapWriter(tmp_path / "pfc.pcap")
    for _port, frame, now in sent:
        w.write(frame, now)
    w.close()
    out = subprocess.run(["tshark", "-r", str(tmp_path / "pfc.pcap"), "-T", "json"], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    pkts = [p["_source"]["layers"] for p in json.loads(out)]
    assert len(pkts) == 2
    for layers, quanta in zip(pkts, ("65535", "0"), strict=True):
        assert layers["eth"]["eth.dst"] == "01:80:c2:00:00:01" and layers["eth"]["eth.type"] == "0x8808"
        macc = layers["macc"]
        assert macc["macc.opcode"] == "0x0101" and macc["macc.cbfc.enbv"] == "0x0008"
        assert macc["CBFC Class Pause Times"]["macc.cbfc.pause_time.c3"] == quanta


def test_xoff_xon_refresh_and_counters() -> None:
    tm, pfc, sent, clock = _setup()
    qps = []
    for i in range(3):
        qp = tm.enqueue(2, i, 1000, 0)
        pfc.on_enqueued(qp, 1, 0, 1000, 0)
        qps.append(qp)
    assert [(p, parse_pfc_frame(f)) for p, f, _ in sent] == [(1, {0: 0xFFFF})]
    pause_ns = quanta_to_ns(0xFFFF, RATE_BPS)
    assert pfc.next_deadline_ns() == pause_ns // 2
    pfc.poll(pause_ns // 2)                      # still above XON: refresh before the quanta run out
    assert len(sent) == 2 and parse_pfc_frame(sent[1][1]) == {0: 0xFFFF}
    pfc.on_dequeued(qps[0], pause_ns // 2)       # 2000 B > XON 1000: still paused
    assert len(sent) == 2
    pfc.on_dequeued(qps[1], pause_ns // 2)       # 1000 B: XON
    assert len(sent) == 3 and parse_pfc_frame(sent[2][1]) == {0: 0}
    c = pfc.counters(1)[0]
    assert (c["pauses_sent"], c["xon_sent"], c["xoff_events"]) == (2, 1, 1)
    assert pfc.port_totals(1)["pfc_pauses_sent"] == 2


def test_headroom_drops_beyond_xoff_plus_headroom() -> None:
    tm, pfc, sent, clock = _setup()
    admitted = 0
    for i in range(10):
        if pfc.admit(1, 2, 1000):
            pfc.on_enqueued(tm.enqueue(2, i, 1000, 0), 1, 2, 1000, 0)
            admitted += 1
    assert admitted == 5                         # XOFF 3000 + headroom 2000
    assert pfc.counters(1)[2]["headroom_drop_pkts"] == 5
    pfc.enable(3, False)
    assert all(pfc.admit(3, 2, 10**6) for _ in range(3))


def test_received_pause_holds_only_that_priority_until_quanta_or_xon() -> None:
    tm, pfc, sent, clock = _setup(levels=8)
    for prio in (3, 5):
        tm.enqueue(2, f"p{prio}", 100, 0, prio)
    assert pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {3: 1000}), 0)
    out = tm.dequeue_due(0)
    assert [q.item for q in out] == ["p5"]       # priority 5 flows
    assert tm.dequeue_due(1000 * 512 - 1) == []  # 1000 quanta at 1 Gb/s = 512 us
    assert [q.item for q in tm.dequeue_due(1000 * 512)] == ["p3"]
    pfc.poll(1000 * 512)
    assert pfc.counters(2)[3]["paused_ns"] == 512_000 and pfc.counters(2)[3]["pauses_rx"] == 1
    tm.enqueue(2, "again", 100, 600_000, 3)
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {3: 0xFFFF}), 600_000)
    assert tm.dequeue_due(700_000) == []
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {3: 0}), 700_000)       # XON resumes at once
    resumed = tm.dequeue_due(700_000)
    assert [q.item for q in resumed] == ["again"]
    assert resumed[0].deq_timestamp_ns == 700_000    # due when the pause ended, not at its arrival (lag accounting)
    c = pfc.counters(2)[3]
    assert (c["paused_ns"], c["pauses_rx"], c["xon_rx"]) == (612_000, 2, 1)


def test_a_pause_ended_by_xon_holds_its_packets_until_it_ended_not_since_arrival() -> None:
    tm, pfc, _, _ = _setup(levels=8)
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {3: 100}), 0)           # 100 quanta: until 51,200 ns
    tm.enqueue(2, "held", 100, 1_000, 3)
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {3: 0}), 80_000)        # XON after the pause expired
    out = tm.dequeue_due(90_000)                      # serviced late: 38.8 us after the expiry, not 89 us
    assert [q.item for q in out] == ["held"] and out[0].deq_timestamp_ns == 51_200
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {3: 0xFFFF}), 100_000)
    tm.enqueue(2, "next", 100, 100_500, 3)
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {3: 10}), 120_000)       # a shorter pause replaces it
    assert tm.dequeue_due(125_119) == [] and tm.dequeue_due(125_120)[0].deq_timestamp_ns == 125_120


def test_pause_on_a_disabled_port_is_consumed_not_honoured() -> None:
    tm, pfc, sent, clock = _setup()
    pfc.enable(2, False)
    tm.enqueue(2, "x", 100, 0)
    assert pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {0: 0xFFFF}), 0)
    assert [q.item for q in tm.dequeue_due(0)] == ["x"]
    assert not pfc.on_frame(2, bytes(12) + b"\x08\x00" + bytes(46), 0)


def test_watchdog_trips_on_a_stuck_pause_and_restores() -> None:
    tm, pfc, sent, clock = _setup()
    pfc.set_watchdog(2, 5)                       # 5 ms
    tm.enqueue(2, "stuck", 100, 0)
    quanta_ns = quanta_to_ns(0xFFFF, RATE_BPS)   # 33.5 ms per frame
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {0: 0xFFFF}), 0)
    assert pfc.next_deadline_ns() == 5_000_000
    pfc.poll(4_999_999)
    assert tm.dequeue_due(4_999_999) == []
    pfc.poll(5_000_000)
    c = pfc.counters(2)[0]
    assert c["watchdog_trips"] == 1 and c["paused_ns"] == 5_000_000
    assert [q.item for q in tm.dequeue_due(5_000_000)] == ["stuck"]   # drained toward the stuck host
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {0: 0xFFFF}), 6_000_000)   # ignored while tripped
    tm.enqueue(2, "during", 100, 6_000_000)
    assert [q.item for q in tm.dequeue_due(6_000_000)] == ["during"]
    assert pfc.counters(2)[0]["pauses_ignored"] == 1
    pfc.poll(10_000_000)                         # restored after as long again
    assert pfc.counters(2)[0]["watchdog_restores"] == 1
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {0: 0xFFFF}), 11_000_000)
    tm.enqueue(2, "held", 100, 11_000_000)
    assert tm.dequeue_due(11_000_000) == [] and quanta_ns > 5_000_000


def test_commands_and_user_errors() -> None:
    tm, pfc, sent, clock = _setup()
    pfc.execute(["pfc_enable", "4", "1"], 0)
    pfc.execute(["pfc_thresholds", "4", "9000", "4000", "3000"], 0)
    pfc.execute(["pfc_watchdog", "4", "2.5"], 0)
    pfc.execute(["pfc_dscp_map", "26", "3"], 0)
    cfg = pfc.ports[4].config
    assert (cfg.enabled, cfg.xoff_bytes, cfg.xon_bytes, cfg.headroom_bytes, cfg.watchdog_ns) == \
        (True, 9000, 4000, 3000, 2_500_000)
    ip4 = bytes(12) + b"\x08\x00" + bytes([0x45, 26 << 2]) + bytes(30)
    assert pfc.classify(ip4, 0) == 3 and pfc.classify(ip4, 5) == 5
    text = pfc.execute(["pfc_stats", "4"], 0)
    assert text.splitlines()[0].split()[:3] == ["port", "prio", "on"] and "pauses_sent" in text
    for bad in (["pfc_enable", "4", "2"], ["pfc_thresholds", "4", "100", "200", "0"],
                ["pfc_thresholds", "4", "x", "1", "1"], ["pfc_watchdog", "4", "-1"], ["pfc_dscp_map", "64", "1"],
                ["pfc_dscp_map", "1", "8"], ["pfc_stats", "1", "2"]):
        with pytest.raises(CommandError) as exc:
            pfc.execute(bad, 0)
        assert getattr(exc.value, "is_user_error", False) and "\n" not in str(exc.value)
