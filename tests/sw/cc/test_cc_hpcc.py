"""HPCC golden model against hand-derived updates (Li et al. SIGCOMM'19 Algorithm 1, fixed point)."""

from __future__ import annotations

import pytest

from sw.cc import AckInfo, CcParamError, CongestionControl, IntHop, NoCc
from sw.cc.hpcc import Hpcc, HpccParams, hop_utilization_q16

pytestmark = pytest.mark.unit

LINE = 100_000_000          # 100 Gb/s in kb/s
T = 10_000                  # base RTT 10 us
BDP = 125_000               # 100 Gb/s * 10 us in bytes


def hop(ts_ns: int, tx_bytes: int, qlen_bytes: int = 0, link_kbps: int = LINE) -> IntHop:
    return IntHop(ts_ns, tx_bytes, qlen_bytes, link_kbps)


def primed(params: HpccParams | None = None) -> Hpcc:
    h = Hpcc(params or HpccParams(line_rate_kbps=LINE, base_rtt_ns=T))
    h.on_ack(AckInfo(1, 1, (hop(0, 0),)), 0)          # first INT only records the hops
    assert (h.window, h.u_q16) == (BDP, 0)
    return h


def test_defaults_and_derived_windows():
    p = HpccParams()
    assert (p.eta_q16, p.max_stage, p.rate_ai_kbps) == (62259, 5, 50_000)
    assert abs(p.eta_q16 / 65536 - 0.95) < 1e-5
    assert (p.w_max_bytes, p.w_min_bytes, p.w_ai_bytes) == (BDP, 125, 62)
    assert isinstance(Hpcc(), CongestionControl) and isinstance(NoCc(LINE), CongestionControl)


def test_hop_utilization_terms():
    # link fully busy for one RTT, empty queue: txRate/B = 1.0
    assert hop_utilization_q16(hop(T, BDP), hop(0, 0), T) == (65536, T)
    # half busy plus a standing queue of one BDP: 0.5 + 1.0
    assert hop_utilization_q16(hop(T, BDP // 2, BDP), hop(0, 0, BDP), T) == (65536 + 32768, T)
    # the queue term takes the smaller of the two samples
    assert hop_utilization_q16(hop(T, 0, BDP), hop(0, 0, 0), T) == (0, T)
    assert hop_utilization_q16(hop(0, 5), hop(0, 0), T) is None
    assert hop_utilization_q16(hop(5, 5), hop(10, 0), T) is None               # timestamp went backwards


def test_int_counters_wrap():
    # the 32-bit tx byte counter wrapped during the interval: still one full RTT of line-rate bytes
    old, new = hop(0, (1 << 32) - 1000), hop(T, BDP - 1000)
    assert hop_utilization_q16(new, old, T) == (65536, T)
    # a 32-bit timestamp wraps too when configured so
    assert hop_utilization_q16(hop(T - 1, BDP), hop((1 << 32) - 1, 0), T, ts_bits=32) == (65536, T)
    # a tx counter that went backwards (reordered ACK) counts as no bytes
    assert hop_utilization_q16(hop(T, 0), hop(0, 500), T) == (0, T)


def test_full_link_cuts_window_to_eta():
    h = primed()
    h.on_ack(AckInfo(2, 100, (hop(T, BDP),)), T)
    assert h.u_q16 == 65536                            # tau = T: U takes the new sample
    assert h.window == BDP * 62259 // 65536 + 62 == 118_811
    assert h.wc_bytes == h.window and h.inc_stage == 0
    assert h.rate_kbps == 118_811 * 8_000_000 // T == 95_048_800


def test_partial_rtt_sample_is_averaged_by_tau():
    h = primed()
    h.on_ack(AckInfo(2, 100, (hop(T // 4, BDP // 4),)), T // 4)   # full link over a quarter RTT
    assert h.u_q16 == (3 * 0 + 1 * 65536) // 4 == 16384
    assert h.inc_stage == 1 and h.window == BDP                     # below eta: additive, capped at BDP


def test_additive_stages_then_multiplicative_increase():
    h = primed(HpccParams(line_rate_kbps=LINE, base_rtt_ns=T, max_stage=2))
    ts, tx, seq = 0, 0, 1
    ts += T
    tx += BDP * 2                                      # 2x overload: U = 2.0, W halves (times eta)
    h.on_ack(AckInfo(seq, seq, (hop(ts, tx),)), ts)
    seq += 1
    w1 = BDP * 62259 // (2 * 65536) + 62
    assert (h.u_q16, h.window) == (2 * 65536, w1)
    expected = [w1 + 62, w1 + 124]                     # U = 0.5 < eta: +W_AI per RTT, stages 1..max_stage
    for w in expected:
        ts += T
        tx += BDP // 2
        h.on_ack(AckInfo(seq, seq, (hop(ts, tx),)), ts)
        seq += 1
        assert (h.u_q16, h.window) == (32768, w)
    assert h.inc_stage == 2
    ts += T
    tx += BDP // 2
    h.on_ack(AckInfo(seq, seq, (hop(ts, tx),)), ts)   # stage == max_stage: W = Wc * eta / U + W_AI
    assert h.window == (w1 + 124) * 62259 // 32768 + 62
    assert h.inc_stage == 0


def test_wc_moves_once_per_rtt():
    h = primed()
    h.on_ack(AckInfo(ack_seq=2, snd_nxt=50_000, hops=(hop(T, BDP // 2),)), T)
    wc = h.wc_bytes
    assert h.last_update_seq == 50_000 and h.inc_stage == 1
    h.on_ack(AckInfo(ack_seq=40_000, snd_nxt=60_000, hops=(hop(2 * T, BDP // 2 + BDP),)), 2 * T)
    assert h.wc_bytes == wc and h.inc_stage == 1      # same RTT: W reacts, Wc and stage do not
    assert h.window != wc


def test_most_loaded_hop_wins():
    h = primed()
    h.on_ack(AckInfo(1, 1, (hop(0, 0), hop(0, 0, link_kbps=LINE // 4))), 0)   # hop count changed: re-record
    h.on_ack(AckInfo(2, 2, (hop(T, BDP // 2), hop(T, BDP // 4, link_kbps=LINE // 4))), T)
    assert h.u_q16 == 65536                            # second hop: 25G link carrying 25G


def test_window_and_rate_are_clamped():
    p = HpccParams(line_rate_kbps=LINE, base_rtt_ns=T, min_rate_kbps=1_000_000)
    h = Hpcc(p)
    h.on_ack(AckInfo(1, 1, (hop(0, 0, 10**9),)), 0)
    h.on_ack(AckInfo(2, 2, (hop(T, BDP, 10**9),)), T)  # huge queue: U saturates, W hits the floor
    assert h.u_q16 == (1 << 24) - 1
    assert h.window == p.w_min_bytes and h.rate_kbps == 1_000_000


def test_acks_without_int_and_cnps_change_nothing():
    h = primed()
    before = (h.window, h.u_q16, h.rate_kbps)
    h.on_ack(AckInfo(5, 5), 100)
    h.on_cnp(200)
    assert (h.window, h.u_q16, h.rate_kbps) == before


@pytest.mark.parametrize(("field", "value", "allowed"), [
    ("eta_q16", 0, "1..65536"),
    ("max_stage", -1, "0..254"),
    ("base_rtt_ns", 10, "100..100000000"),
    ("rate_ai_kbps", 200_000_000, "0..100000000"),
    ("eta_q16", 0.95, "integer"),
])
def test_bad_parameters_are_user_errors(field, value, allowed):
    with pytest.raises(CcParamError) as err:
        HpccParams(**{field: value})
    assert err.value.is_user_error and f"hpcc.{field}=" in str(err.value) and allowed in str(err.value)


def test_nocc_is_a_fixed_line_rate():
    cc = NoCc(LINE)
    cc.on_cnp(10)
    cc.on_ack(AckInfo(1, 1, (hop(0, 0),)), 20)
    assert cc.rate_kbps == LINE and cc.window_bytes is None and cc.rate_bps == 100 * 10**9


def test_terms_saturate_and_a_hop_without_link_rate_gives_no_sample():
    # each term and their sum saturate at U_MAX (the RTL divider's quotient width): the first such hop wins
    big_q = hop_utilization_q16(hop(T, BDP, 10**9), hop(0, 0, 10**9), T)
    big_both = hop_utilization_q16(hop(1, 10**9, 10**9), hop(0, 0, 10**9), T)
    assert big_q == ((1 << 24) - 1, T) and big_both == ((1 << 24) - 1, 1)
    h = primed()
    h.on_ack(AckInfo(1, 1, (hop(0, 0, 10**9), hop(0, 0, 10**9))), 0)
    h.on_ack(AckInfo(2, 2, (hop(T, BDP, 10**9), hop(1, 10**9, 10**9))), T)
    assert h.u_q16 == (1 << 24) - 1                             # tau from hop 1 (dts = T): U takes u fully
    assert h.window == BDP * 62259 // ((1 << 24) - 1) + 62 == 525
    assert hop_utilization_q16(hop(T, BDP, 0, 0), hop(0, 0, 0, 0), T) is None
