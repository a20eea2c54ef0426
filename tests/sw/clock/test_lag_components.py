"""Lag accounting of the data-path components on a manual clock (issue 16): the NIC pacer (send vs its token
schedule), the link emulator's delay line (release vs release time), the shm throttle (grant vs tokens back),
and their reporting through $STARPULSE_LAG_DIR."""

from __future__ import annotations

import random
import socket

import pytest

from emu.wire import WireProfile, _Direction
from sw.clock import ManualClock
from sw.clock.lag import LagStats, read_lag_dir, register, write_lag_file
from sw.collectives.transport.throttle import Throttle
from sw.roce.softnic.qp_pacer import QpPacer, make_cc

pytestmark = pytest.mark.unit


def test_pacer_counts_how_late_a_waiting_frame_left() -> None:
    lag = LagStats(bound_ns=10_000)
    pacer = QpPacer(make_cc("none", 100_000_000), 0, burst_bytes=2000, lag=lag)
    assert pacer.may_send(0)
    pacer.charge(1000, 0)                             # the bucket in deficit: the next frame waits
    assert not pacer.may_send(0) and lag.events == 0
    due = pacer.next_send_ns(0)
    assert due is not None and due > 0
    assert pacer.may_send(due + 3_000)
    pacer.charge(1000, due + 3_000)
    assert lag.events == 1 and lag.max_ns == 3_000 and lag.late == 0
    assert not pacer.may_send(due + 3_001)            # in deficit again: due at the next token time
    nxt = pacer.next_send_ns(due + 3_001)
    assert nxt is not None and pacer.may_send(nxt + 50_000)
    pacer.charge(1000, nxt + 50_000)
    assert lag.events == 2 and lag.late == 1 and lag.max_ns == 50_000
    pacer.mark_idle()                                 # nothing to send is not lateness
    pacer.charge(1000, nxt + 10**9)
    assert lag.events == 2


def test_wire_records_release_lateness_of_its_delay_line() -> None:
    a, b = socket.socketpair()
    try:
        d = _Direction(a, b, WireProfile(rate_bps=1_000_000_000, delay_ns=5_000), random.Random(1),
                       lag=LagStats(12_304))
        d.admit(bytes(100), 0)
        d.admit(bytes(100), 0)
        d.release(2_000_000)                           # both 2 ms late of ~6 us release times
        assert d.counters.tx_frames == 2 and d.lag is not None
        assert d.lag.events == 2 and d.lag.late == 2 and 1_990_000 < d.lag.max_ns <= 2_000_000
    finally:
        a.close()
        b.close()


def test_throttle_counts_a_held_back_sender_coming_back_late() -> None:
    clock = ManualClock()
    t = Throttle(8e9, burst_bytes=64 * 1024, clock=clock, idle_burst_bytes=0)   # 1 byte per ns
    t.backlogged = True
    assert t.grant(20_000) == 0                       # nothing banked: held back, due when 16 KiB are back
    clock.advance_ns(16 * 1024 + 400_000)             # came back 400 us late
    assert t.grant(20_000) > 0
    assert t.lag.events == 1 and t.lag.max_ns == 400_000 and not t.lag.ok


def test_processes_report_through_the_lag_dir(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STARPULSE_LAG_DIR", str(tmp_path))
    s = register("unit pacer", LagStats(100))
    s.record(500, 3)
    other = register("unit pacer", LagStats(100))     # a second one of that name is kept apart
    other.record(5)
    path = write_lag_file()
    assert path is not None and path.parent == tmp_path
    got = read_lag_dir(tmp_path)
    assert got["unit pacer"].late == 3 and got["unit pacer #2"].events == 1
