"""The host NIC's PFC (sw.roce.softnic.pfc) on a manual clock: pauses hold the transmitter for the quanta or until XON,
a receive backlog sends XOFF/XON, and the NIC consumes PFC frames instead of counting them as non-RoCE."""

from __future__ import annotations

import pytest

from sw.clock import ManualClock
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.pfc import NicPfc, PfcConfigError
from sw.units.pfc_frame import build_pfc_frame, parse_pfc_frame
from tests.sw.roce.softnic.mem_port import MemPort

pytestmark = pytest.mark.unit

RATE_BPS = 1_000_000_000        # one quantum = 512 ns
SWITCH_MAC = bytes.fromhex("025046000001")


def test_pause_holds_transmitter_for_quanta_and_xon_releases() -> None:
    sent: list[bytes] = []
    pfc = NicPfc(mac="02:00:00:00:00:01", line_rate_bps=RATE_BPS, send=sent.append, priority=3)
    assert pfc.on_frame(build_pfc_frame(SWITCH_MAC, {5: 0xFFFF}), 0) and not pfc.tx_paused(0)   # other priority
    assert pfc.on_frame(build_pfc_frame(SWITCH_MAC, {3: 1000}), 0)
    assert pfc.tx_paused(511_999) and not pfc.tx_paused(512_000)
    pfc.on_frame(build_pfc_frame(SWITCH_MAC, {3: 0xFFFF}), 600_000)
    assert pfc.tx_paused(700_000)
    pfc.on_frame(build_pfc_frame(SWITCH_MAC, {3: 0}), 700_000)
    assert not pfc.tx_paused(700_000)
    c = pfc.as_dict(800_000)
    assert (c["pauses_rx"], c["xon_rx"], c["paused_ns"]) == (2, 1, 612_000)
    assert not pfc.on_frame(bytes(12) + b"\x08\x00" + bytes(46), 0)


def test_receive_backlog_sends_xoff_refresh_and_xon() -> None:
    sent: list[bytes] = []
    pfc = NicPfc(mac="02:00:00:00:00:01", line_rate_bps=RATE_BPS, send=sent.append, priority=0,
                 rx_xoff_frames=100, rx_xon_frames=10)
    pfc.on_rx_burst(50, 0)
    assert sent == []
    pfc.on_rx_burst(150, 0)
    pfc.on_rx_burst(150, 1000)                          # refresh not due yet
    half_ns = pfc.quanta_ns(0xFFFF) // 2
    pfc.on_rx_burst(150, half_ns)                       # due: refreshed
    pfc.on_rx_burst(50, half_ns + 1)                    # between XON and XOFF: still paused
    pfc.on_rx_burst(5, half_ns + 2)
    assert [parse_pfc_frame(f) for f in sent] == [{0: 0xFFFF}, {0: 0xFFFF}, {0: 0}]
    assert sent[0][:6] == bytes.fromhex("0180c2000001") and sent[0][6:12] == bytes.fromhex("020000000001")
    c = pfc.counters
    assert (c.pauses_sent, c.xon_sent, c.xoff_events) == (2, 1, 1)
    with pytest.raises(PfcConfigError):
        NicPfc(mac="02:00:00:00:00:01", line_rate_bps=RATE_BPS, send=sent.append, priority=8)
    with pytest.raises(PfcConfigError):
        NicPfc(mac="02:00:00:00:00:01", line_rate_bps=RATE_BPS, send=sent.append, rx_xoff_frames=5,
               rx_xon_frames=6)


def test_nic_consumes_pfc_frames_and_waits_for_the_pause() -> None:
    clock = ManualClock()
    port = MemPort()
    nic = SoftNic(port, mac="02:00:00:00:00:01", ip="10.9.0.1", line_rate_bps=RATE_BPS, clock=clock, pfc_priority=0)
    port.rx.append(build_pfc_frame(SWITCH_MAC, {0: 2000}))
    nic.progress()
    assert nic.counters.non_roce_frames == 0 and nic.pfc is not None and nic.pfc.counters.pauses_rx == 1
    assert nic.next_deadline_ns() == 2000 * 512
    assert nic._transmit(0) is False
    clock.advance_ns(2000 * 512)
    nic.progress()
    assert nic.next_deadline_ns() is None and nic.pfc.as_dict(clock.now_ns())["paused_ns"] == 1_024_000
    plain = SoftNic(MemPort(), mac="02:00:00:00:00:02", ip="10.9.0.2", line_rate_bps=RATE_BPS, clock=clock)
    plain.port.rx.append(build_pfc_frame(SWITCH_MAC, {0: 2000}))     # PFC off: not ours to honour
    plain.progress()
    assert plain.pfc is None and plain.counters.non_roce_frames == 1


def test_nic_releases_its_pause_once_its_receive_queue_is_empty() -> None:
    """A paused port sends the NIC nothing: the NIC's XON comes from the poll that finds its queue drained, not
    from a small burst that could never arrive (its pause would otherwise hold the port like a stuck one)."""
    clock = ManualClock()
    port = MemPort()
    nic = SoftNic(port, mac="02:00:00:00:00:01", ip="10.9.0.1", line_rate_bps=RATE_BPS, clock=clock,
                  pfc_priority=0, pfc_rx_xoff_frames=4, pfc_rx_xon_frames=1)
    assert nic.pfc is not None
    nic.progress()                                               # idle, never paused: nothing sent
    assert [f for f in port.tx if parse_pfc_frame(f) is not None] == []
    port.rx.extend(bytes(12) + b"\x08\x00" + bytes(46) for _ in range(6))   # a backlog of 6 frames
    nic.progress()
    assert nic.pfc.xoff and [parse_pfc_frame(f) for f in port.tx] == [{0: 0xFFFF}]
    clock.advance_ns(1000)
    nic.progress()                                               # queue empty: the backlog is gone
    assert not nic.pfc.xoff and [parse_pfc_frame(f) for f in port.tx] == [{0: 0xFFFF}, {0: 0}]
    nic.progress()                                               # released once, not again
    c = nic.pfc.counters
    assert (c.pauses_sent, c.xon_sent, c.xoff_events) == (1, 1, 1) and len(port.tx) == 2
