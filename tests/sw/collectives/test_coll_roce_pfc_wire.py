"""The collectives' RoCE wire (``WirePort``) under PFC on a manual clock: a pause of the NIC's priority, taken and
counted by the NIC's own ``NicPfc``, holds the frames queued on the wire for the quanta or until XON, earning no
burst meanwhile; a pause of another priority does not; the NIC's own PFC frames go out at once."""

from __future__ import annotations

from typing import cast

import pytest

from sw.clock import ManualClock
from sw.collectives.transport.roce import WirePort
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.port import RawSocketPort
from sw.units import ETH_WIRE_OVERHEAD_BYTES
from sw.units.pfc_frame import build_pfc_frame, parse_pfc_frame
from tests.sw.roce.softnic.mem_port import MemPort

pytestmark = pytest.mark.unit

RATE_BPS = 1_000_000_000        # one quantum = 512 ns; a 1000-byte frame (+24) = 8192 ns
PRIO = 3
SWITCH_MAC = bytes.fromhex("025046000001")
DATA = bytes(12) + b"\x08\x00" + bytes(986)     # 1000 bytes


def _wire(rx_xoff_frames: int = 0) -> tuple[WirePort, SoftNic, MemPort, ManualClock]:
    clock = ManualClock()
    port = MemPort()
    wire = WirePort(cast(RawSocketPort, port), RATE_BPS, clock)   # MemPort has the raw port's calls
    nic = SoftNic(wire, mac=port.mac, ip=port.ip, line_rate_bps=RATE_BPS, clock=clock, pfc_priority=PRIO,
              pfc_rx_xoff_frames=rx_xoff_frames, pfc_rx_xon_frames=0)
    wire.pfc = nic.pfc
    return wire, nic, port, clock


def test_a_pause_of_our_priority_holds_the_wire_for_its_quanta() -> None:
    wire, nic, port, clock = _wire()
    while not wire._queue and len(port.tx) < 100:     # spend the initial burst
        wire.send(DATA)
    burst = len(port.tx)
    assert 1 < burst < 100 and len(wire._queue) == 1
    wire.send(DATA)
    wire.send(DATA)
    port.rx.append(build_pfc_frame(SWITCH_MAC, {PRIO: 1000}))            # 512 us
    nic.progress()
    assert nic.pfc is not None and nic.pfc.counters.pauses_rx == 1
    assert wire.ready_in_ns() == 512_000
    clock.advance_ns(511_999)
    assert wire.drain() is False and len(port.tx) == burst
    clock.advance_ns(1)
    wire.drain()
    assert len(port.tx) == burst          # no tokens earned during the pause: no burst when it ends
    frame_ns = (len(DATA) + ETH_WIRE_OVERHEAD_BYTES) * 8
    clock.advance_ns(frame_ns)
    assert wire.drain() is True and len(port.tx) == burst + 1
    clock.advance_ns(2 * frame_ns)
    wire.drain()
    assert len(port.tx) == burst + 3
    assert nic.pfc.as_dict(clock.now_ns())["paused_ns"] == 512_000


def test_xon_resumes_and_other_priorities_do_not_pause() -> None:
    wire, nic, port, clock = _wire()
    port.rx.append(build_pfc_frame(SWITCH_MAC, {0: 0xFFFF}))             # priority 0 (lossy class): not ours
    nic.progress()
    wire.send(DATA)
    assert len(port.tx) == 1
    port.rx.append(build_pfc_frame(SWITCH_MAC, {PRIO: 0xFFFF}))
    nic.progress()
    wire.send(DATA)
    assert len(port.tx) == 1
    clock.advance_ns(1_000_000)
    port.rx.append(build_pfc_frame(SWITCH_MAC, {PRIO: 0}))               # XON
    nic.progress()
    assert wire.drain() is True and len(port.tx) == 2
    assert nic.pfc is not None
    c = nic.pfc.counters
    assert (c.pauses_rx, c.xon_rx, c.paused_ns) == (1, 1, 1_000_000)


def test_our_own_pause_frames_leave_while_the_wire_is_paused() -> None:
    wire, nic, port, clock = _wire(rx_xoff_frames=2)
    port.rx += [build_pfc_frame(SWITCH_MAC, {PRIO: 0xFFFF}), DATA, DATA]  # paused, and a receive backlog of 3 frames
    wire.send(DATA)
    assert port.tx == [DATA]
    nic.progress()
    wire.send(DATA)
    assert [parse_pfc_frame(f) for f in port.tx[1:]] == [{PRIO: 0xFFFF}]   # XOFF out at once, the data frame held
