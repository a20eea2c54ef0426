"""The golden replay of ``hil run --cc dcqcn`` (``sw.apps.hil.rate_replay``): reads that trail the model by up to the
RTL's lag match, a read one step off or later than the lag does not, bytes sent reach the model's byte counter."""

from __future__ import annotations

import pytest

from sw.apps.hil.rate_replay import RateRead, model_trajectory, replay
from sw.cc import DcqcnParams, DcqcnRp, RateToIncrement

pytestmark = pytest.mark.unit

CLK_NS = 2.5
CONV = RateToIncrement()
PARAMS = DcqcnParams(line_rate_kbps=4_000_000, min_rate_kbps=250_000, alpha_timer_ns=4_000, rate_timer_ns=55_000,
                     fast_recovery_stages=1, rate_ai_kbps=40_000, clamp_target_rate=False, byte_counter_bytes=100_000)
INIT = 400              # clock of QP_INIT
CNPS = [4_000, 8_000, 60_000]
LAG_NS = 500


def _model_rate(t_ns: int) -> int:
    """The model's increment at ``t_ns``, fed the CNPs before it (no bytes)."""
    m = DcqcnRp(PARAMS, now_ns=int(INIT * CLK_NS))
    for c in CNPS:
        if c * CLK_NS <= t_ns:
            m.on_cnp(int(c * CLK_NS))
    m.advance(t_ns)
    return CONV.increment(m.rc_kbps)


def _reads(lag_clocks: int, every: int = 400, until: int = 200_000) -> list[RateRead]:
    """Reads of QP 0 every ``every`` clocks, each showing the model's value ``lag_clocks`` earlier."""
    return [RateRead(c, 0, _model_rate(int((c - lag_clocks) * CLK_NS)), 0)
            for c in range(INIT + 400 + lag_clocks, until, every)]


def _replay(reads: list[RateRead]) -> dict:
    return replay(PARAMS, clk_ns=CLK_NS, qp=0, init=(INIT, 0), cnp_cycles=CNPS, reads=reads, mtu_bytes=256,
                  lag_ns=LAG_NS, conv=CONV)


def test_reads_trailing_the_model_within_the_lag_match() -> None:
    for lag_clocks in (0, 100, 199):
        out = _replay(_reads(lag_clocks))
        assert out["matches"] and out["mismatches"] == [] and out["compared"] > 400, (lag_clocks, out["mismatches"])
    cut = [inc for _, _, inc in _replay(_reads(0))["model_trace"]]
    assert min(cut) < CONV.increment(PARAMS.line_rate_kbps), "the CNPs cut nothing: the check would be empty"


def test_a_wrong_or_too_late_value_is_a_mismatch() -> None:
    reads = _reads(0)
    k = len(reads) // 2
    reads[k] = RateRead(reads[k].cycle, 0, reads[k].value + 1, 0)
    out = _replay(reads)
    assert not out["matches"] and len(out["mismatches"]) == 1 and f"clock {reads[k].cycle}" in out["mismatches"][0]
    # a rate that trails by much more than the lag: the reads right after each cut still show the old rate
    late = _replay(_reads(2_000, every=40))
    assert not late["matches"]


def test_a_read_of_another_qp_is_not_compared_and_no_read_is_no_match() -> None:
    reads = [*_reads(0), RateRead(INIT + 500, 3, 12345, 0)]
    assert _replay(reads)["compared"] == len(reads) - 1
    assert _replay([])["matches"] is False


def test_bytes_sent_reach_the_byte_counter() -> None:
    """100 kB sent after the last CNP's timers: the model's byte counter fires an increase the timers alone would not
    have made by then."""
    t_end = int(61_000 * CLK_NS)
    quiet = model_trajectory(PARAMS, int(INIT * CLK_NS), [int(c * CLK_NS) for c in CNPS], [], t_end)
    sent = model_trajectory(PARAMS, int(INIT * CLK_NS), [int(c * CLK_NS) for c in CNPS],
                            [(int(60_500 * CLK_NS), 100_000)], t_end)
    assert sent[-1][1] > quiet[-1][1]


def test_a_cnp_that_beat_the_sweep_to_a_due_timer_matches_and_the_model_order_alone_would_not() -> None:
    """A CNP 100 ns after an alpha deadline: the RTL may take it before its sweep applies that expiry (the CNP's timer
    reset swallows it).  Reads showing that order match through the replay's second order; values no order gives
    still do not."""
    init_ns = int(INIT * CLK_NS)
    cnp1 = 10_000
    cnp2 = cnp1 + PARAMS.alpha_timer_ns + 100          # the first CNP reset the alpha timer: due 100 ns before it
    rtl = DcqcnRp(PARAMS, now_ns=init_ns)
    rtl.on_cnp(cnp1)
    rtl.advance(cnp2 - 150)
    rtl.next_alpha_ns = cnp2 + 1                          # the sweep had not reached the due expiry: swallowed
    rtl.on_cnp(cnp2)
    own = DcqcnRp(PARAMS, now_ns=init_ns)
    own.on_cnp(cnp1)
    own.on_cnp(cnp2)
    assert CONV.increment(rtl.rc_kbps) != CONV.increment(own.rc_kbps), "the orders agree: the test checks nothing"
    reads = [RateRead(int((cnp2 + 600) / CLK_NS), 0, CONV.increment(rtl.rc_kbps), 0)]
    out = replay(PARAMS, clk_ns=CLK_NS, qp=0, init=(INIT, 0), cnp_cycles=[int(cnp1 / CLK_NS), int(cnp2 / CLK_NS)],
                 reads=reads, mtu_bytes=256, lag_ns=LAG_NS, conv=CONV)
    assert out["matches"] and out["orders"] >= 2 and out["order"] > 0, out
    assert model_trajectory(PARAMS, init_ns, [cnp1, cnp2], [], cnp2 + 600)[-1][1] == own.rc_kbps
    wrong = [RateRead(reads[0].cycle, 0, reads[0].value + 1, 0)]
    assert not replay(PARAMS, clk_ns=CLK_NS, qp=0, init=(INIT, 0), cnp_cycles=[int(cnp1 / CLK_NS),
                      int(cnp2 / CLK_NS)], reads=wrong, mtu_bytes=256, lag_ns=LAG_NS, conv=CONV)["matches"]
