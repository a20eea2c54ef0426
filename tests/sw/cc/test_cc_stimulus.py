"""Random stimulus for RTL scoreboards: deterministic, covers every CC state, keeps the model invariants."""

from __future__ import annotations

import pytest

from sw.cc import DcqcnParams, HpccParams, RpStage
from sw.cc.fixedpoint import ALPHA_ONE, U_MAX
from sw.cc.stimulus import dcqcn_rp_events, hpcc_acks, replay_dcqcn_rp, replay_hpcc

pytestmark = pytest.mark.unit

RP = DcqcnParams(line_rate_kbps=100_000_000, byte_counter_bytes=1_000_000, rate_timer_ns=20_000)


def test_streams_are_deterministic():
    assert list(dcqcn_rp_events(3, 50, RP)) == list(dcqcn_rp_events(3, 50, RP))
    assert list(dcqcn_rp_events(3, 50, RP)) != list(dcqcn_rp_events(4, 50, RP))
    assert list(hpcc_acks(3, 20)) == list(hpcc_acks(3, 20))


def test_dcqcn_stream_covers_every_stage_within_invariants():
    events = list(dcqcn_rp_events(11, 3000, RP))
    assert all(a.now_ns <= b.now_ns for a, b in zip(events, events[1:], strict=False))
    states = replay_dcqcn_rp(events, RP)
    assert {s.last_stage for s in states} == set(RpStage)
    for s in states:
        assert RP.min_rate_kbps <= s.rc_kbps <= s.rt_kbps <= RP.line_rate_kbps
        assert 0 <= s.alpha_q16 <= ALPHA_ONE
        assert 0 <= s.t_count <= 255 and 0 <= s.bc_count <= 255
        assert 0 <= s.bytes_acc < RP.byte_counter_bytes
    assert min(s.rc_kbps for s in states) < RP.line_rate_kbps // 8


def test_hpcc_stream_exercises_both_branches_within_invariants():
    p = HpccParams(max_stage=3)
    states = replay_hpcc(list(hpcc_acks(5, 2000, p, hops=3)), p)
    stages = {s.inc_stage for s in states}
    assert stages == {0, 1, 2, 3}
    for s in states:
        assert p.w_min_bytes <= s.window_bytes <= p.w_max_bytes
        assert p.w_min_bytes <= s.wc_bytes <= p.w_max_bytes
        assert 0 <= s.u_q16 <= U_MAX
        assert p.min_rate_kbps <= s.rate_kbps <= p.line_rate_kbps
    assert len({s.window_bytes for s in states}) > 100
