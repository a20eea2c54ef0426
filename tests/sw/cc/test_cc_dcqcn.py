"""DCQCN golden model against hand-derived trajectories (Zhu et al. SIGCOMM'15 rules, integer arithmetic)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sw.cc import CcParamError, CongestionControl, DcqcnNp, DcqcnParams, DcqcnRp, RpStage
from sw.cc.fixedpoint import ALPHA_ONE

pytestmark = pytest.mark.unit

US = 1_000
LINE = 100_000_000  # 100 Gb/s in kb/s


def test_defaults_are_the_literature_values():
    p = DcqcnParams()
    assert (p.g_shift, p.alpha_timer_ns, p.rate_timer_ns) == (8, 55 * US, 55 * US)
    assert (p.byte_counter_bytes, p.fast_recovery_stages, p.cnp_interval_ns) == (10_000_000, 5, 50 * US)
    assert (p.rate_ai_kbps, p.rate_hai_kbps, p.min_rate_kbps) == (40_000, 100_000, 100_000)
    assert p.alpha_init_q16 == ALPHA_ONE


def test_models_satisfy_the_common_interface():
    assert isinstance(DcqcnRp(), CongestionControl)


def test_single_cnp_at_alpha_one_halves_the_rate():
    rp = DcqcnRp(DcqcnParams(line_rate_kbps=LINE))
    assert rp.alpha_q16 == ALPHA_ONE and rp.rc_kbps == LINE
    rp.on_cnp(0)
    assert rp.rc_kbps == LINE // 2
    assert rp.rt_kbps == LINE
    assert rp.alpha_q16 == ALPHA_ONE           # (1 - 1/256) * 1 + 1/256 = 1
    assert rp.rate_bps == 50_000_000_000


def test_fast_recovery_reaches_target_after_f_timer_periods():
    rp = DcqcnRp(DcqcnParams(line_rate_kbps=LINE))
    rp.on_cnp(0)
    # Rc_k = (Rt + Rc_{k-1}) / 2 with Rt = 100G: the gap to Rt halves each 55 us period.
    expected = [75_000_000, 87_500_000, 93_750_000, 96_875_000, 98_437_500]
    for k, rc in enumerate(expected, start=1):
        rp.advance(k * 55 * US - 1)
        assert rp.rc_kbps == (expected[k - 2] if k > 1 else 50_000_000), "no increase before the deadline"
        rp.advance(k * 55 * US)
        assert rp.rc_kbps == rc
        assert rp.last_stage is RpStage.FAST_RECOVERY
        assert rp.t_count == k
    assert LINE - rp.rc_kbps == (LINE // 2) >> 5   # within (Rt - Rc0) / 2^F of the target
    rp.advance(6 * 55 * US)
    assert rp.last_stage is RpStage.ADDITIVE
    assert rp.rt_kbps == LINE                       # target clamped at line rate
    rp.advance(100 * 55 * US)
    assert rp.rc_kbps == LINE                       # the rounded-up mean reaches the target exactly


def test_alpha_decays_by_g_each_alpha_period_and_saturates():
    rp = DcqcnRp()
    rp.on_cnp(0)
    rp.advance(55 * US)
    assert rp.alpha_q16 == 65536 - 256
    rp.advance(110 * US)
    assert rp.alpha_q16 == 65280 - 255
    rp.advance(1_000_000_000)                       # 1 s: alpha reaches its floor 2^g - 1
    assert rp.alpha_q16 == 255


def test_second_cnp_uses_decayed_alpha():
    rp = DcqcnRp(DcqcnParams(line_rate_kbps=LINE))
    rp.on_cnp(0)
    rp.advance(55 * US)                             # alpha 65280, Rc 75G
    rp.on_cnp(55 * US + 1)
    assert rp.rt_kbps == 75_000_000
    assert rp.rc_kbps == 75_000_000 - (75_000_000 * 65280 >> 17) == 37_646_485
    assert rp.alpha_q16 == 65280 - 255 + 256
    assert (rp.next_alpha_ns, rp.next_rate_ns) == (110 * US + 1, 110 * US + 1)


def test_additive_then_hyper_increase():
    p = DcqcnParams(line_rate_kbps=LINE, byte_counter_bytes=1_000_000)
    rp = DcqcnRp(p)
    rp.on_cnp(0)
    rp.advance(5 * 55 * US)
    rp.on_cnp(5 * 55 * US)                          # now Rt < line rate, so increases are visible
    rt0 = rp.rt_kbps
    for k in range(1, 6):
        rp.advance(5 * 55 * US + k * 55 * US)
        assert rp.rt_kbps == rt0 and rp.last_stage is RpStage.FAST_RECOVERY
    rp.advance(5 * 55 * US + 6 * 55 * US)
    assert rp.last_stage is RpStage.ADDITIVE and rp.rt_kbps == rt0 + 40_000
    now = 5 * 55 * US + 6 * 55 * US
    for _ in range(5):                              # byte counter stages 1..5: still additive (T > F)
        rt = rp.rt_kbps
        rp.on_bytes_sent(1_000_000, now)
        assert rp.last_stage is RpStage.ADDITIVE and rp.rt_kbps == rt + 40_000
    rt = rp.rt_kbps
    rp.on_bytes_sent(1_000_000, now)                # both counters > F: hyper increase
    assert rp.bc_count == 6 and rp.last_stage is RpStage.HYPER
    assert rp.rt_kbps == rt + 100_000


def test_byte_counter_keeps_remainder_and_resets_on_cnp():
    rp = DcqcnRp(DcqcnParams(byte_counter_bytes=1000))
    rp.on_cnp(0)
    rp.on_bytes_sent(2500, 10)
    assert (rp.bc_count, rp.bytes_acc) == (2, 500)
    rp.on_cnp(20)
    assert (rp.bc_count, rp.bytes_acc, rp.t_count) == (0, 0, 0)


def test_min_rate_clamp():
    p = DcqcnParams(line_rate_kbps=LINE, min_rate_kbps=1_000_000)
    rp = DcqcnRp(p)
    for i in range(20):
        rp.on_cnp(i)
    assert rp.rc_kbps == 1_000_000
    assert rp.rt_kbps >= rp.rc_kbps


_events = st.lists(st.tuples(st.integers(0, 400 * US), st.sampled_from(["cnp", "bytes", "adv"]),
                             st.integers(0, 3_000_000)), max_size=25)


@settings(max_examples=60, deadline=None)
@given(_events)
def test_one_big_advance_equals_stepping_through_every_deadline(events):
    """The fixpoint shortcuts inside advance() never change the result (determinism for the RTL)."""
    p = DcqcnParams(line_rate_kbps=LINE, byte_counter_bytes=1_000_000, rate_timer_ns=20 * US)
    fast, slow = DcqcnRp(p), DcqcnRp(p)
    now = 0
    for dt, kind, n in events:
        now += dt
        # slow: visit every deadline one by one before the event
        while slow.next_deadline_ns <= now:
            slow.advance(slow.next_deadline_ns)
        for rp in (fast, slow):
            if kind == "cnp":
                rp.on_cnp(now)
            elif kind == "bytes":
                rp.on_bytes_sent(n, now)
            else:
                rp.advance(now)
        assert fast.state() == slow.state()
        assert p.min_rate_kbps <= fast.rc_kbps <= fast.rt_kbps <= LINE
    fast.advance(now + 10**8)
    while slow.next_deadline_ns <= now + 10**8:
        slow.advance(slow.next_deadline_ns)
    slow.advance(now + 10**8)
    assert fast.state() == slow.state()


def test_time_cannot_go_backwards():
    rp = DcqcnRp()
    rp.advance(100)
    with pytest.raises(ValueError, match="backwards"):
        rp.on_cnp(99)


def test_np_emits_at_most_one_cnp_per_qp_per_interval():
    np_ = DcqcnNp()
    assert np_.on_packet(7, ce=False, now_ns=0) is False
    assert np_.on_ce(7, 0) is True
    assert np_.on_ce(7, 50 * US - 1) is False
    assert np_.on_ce(8, 1) is True                  # another QP has its own interval
    assert np_.on_ce(7, 50 * US) is True
    assert (np_.ce_packets, np_.cnps_sent) == (4, 3)


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("g_shift", 0, "1..16"),
    ("fast_recovery_stages", 255, "0..254"),
    ("min_rate_kbps", 0, "1..100000000"),
    ("rate_timer_ns", 0, "1..4294967295"),
    ("alpha_init_q16", 70_000, "0..65536"),
    ("line_rate_kbps", 2.5e6, "integer"),
])
def test_bad_parameters_are_user_errors_naming_the_field(field, value, allowed):
    with pytest.raises(CcParamError) as err:
        DcqcnParams(**{field: value})
    assert err.value.is_user_error is True
    assert f"dcqcn.{field}=" in str(err.value) and allowed in str(err.value)


def test_replace_revalidates():
    p = DcqcnParams().replace(rate_timer_ns=300 * US)
    assert p.rate_timer_ns == 300_000
    with pytest.raises(CcParamError, match="min_rate_kbps"):
        DcqcnParams(line_rate_kbps=10_000).replace(min_rate_kbps=20_000)


def test_unclamped_target_survives_back_to_back_cnps():
    for clamp, rt_after in ((True, LINE // 2), (False, LINE)):
        rp = DcqcnRp(DcqcnParams(line_rate_kbps=LINE, clamp_target_rate=clamp))
        rp.on_cnp(0)
        rp.on_cnp(50 * US)                          # no timer increase in between
        assert rp.rt_kbps == rt_after
        assert rp.rc_kbps == LINE // 4
        rp.advance(50 * US + 55 * US)               # one increase, then a CNP: Rt follows Rc in both modes
        rc = rp.rc_kbps
        rp.on_cnp(50 * US + 55 * US + 1)
        assert rp.rt_kbps == rc
    with pytest.raises(CcParamError, match="clamp_target_rate=1: allowed values are True, False"):
        not_a_bool: Any = 1                         # an int where a bool belongs, as from a JSON file
        DcqcnParams(clamp_target_rate=not_a_bool)
