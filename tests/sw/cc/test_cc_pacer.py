"""Token-bucket pacer model: exact long-run rate, burst cap, deficit rule, rate changes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sw.cc.pacer import UNITS_PER_BYTE, TokenBucket

pytestmark = pytest.mark.unit


def run_saturated(tb: TokenBucket, pkt_bytes: int, until_ns: int) -> list[int]:
    """Send back-to-back whenever eligible; returns the send times."""
    now, times = 0, []
    while True:
        now = tb.next_eligible_ns(now)
        if now > until_ns:
            return times
        assert tb.try_send(pkt_bytes, now)
        times.append(now)


def test_paces_at_exactly_the_rate():
    tb = TokenBucket(rate_bps=10_000_000_000, burst_bytes=0, start_full=True)   # 10 Gb/s, no burst
    times = run_saturated(tb, 1000, 1_000_000)
    # 1000 B at 10 Gb/s = 800 ns apart: sends at 0, 800, ..., 1_000_000 ns
    assert times[:3] == [0, 800, 1600]
    assert len(times) == 1_000_000 // 800 + 1
    assert all(b - a == 800 for a, b in zip(times, times[1:], strict=False))


def test_burst_allows_back_to_back_then_paces():
    tb = TokenBucket(rate_bps=1_000_000_000, burst_bytes=3000)
    times = run_saturated(tb, 1000, 20_000)
    assert times[:4] == [0, 0, 0, 0]           # 3000 B of credit: sends while credit >= 0 (4th goes to -1000)
    assert times[4:6] == [8000, 16000]          # each 1000 B deficit refills in 8 us at 1 Gb/s


def test_credit_saturates_at_burst():
    tb = TokenBucket(rate_bps=1_000_000_000, burst_bytes=1500, start_full=False)
    tb.refill(10**9)
    assert tb.credit == 1500 * UNITS_PER_BYTE and tb.credit_bytes == 1500


def test_rate_change_keeps_earned_credit():
    tb = TokenBucket(rate_bps=8_000_000_000, burst_bytes=10_000, start_full=False)   # 1 B/ns
    tb.set_rate(800_000_000, 1000)                  # 1000 B earned at the old rate, then 0.1 B/ns
    tb.refill(2000)
    assert tb.credit_bytes == 1000 + 100


def test_large_packet_goes_into_deficit():
    tb = TokenBucket(rate_bps=8_000_000_000, burst_bytes=100)
    assert tb.try_send(4000, 0)
    assert not tb.try_send(64, 1)
    assert tb.next_eligible_ns(1) == 3900          # 3900 B deficit at 1 B/ns


@settings(max_examples=40, deadline=None)
@given(st.integers(1_000_000, 400_000_000_000), st.integers(64, 9000), st.integers(0, 20_000))
def test_long_run_rate_is_exact_within_one_packet(rate_bps, pkt, burst):
    tb = TokenBucket(rate_bps, burst)
    horizon = 2_000 * pkt * 8 * 10**9 // rate_bps   # about 2000 packets' worth of time
    n = len(run_saturated(tb, pkt, horizon))
    ideal = rate_bps * horizon // (8 * 10**9) + burst
    # within one packet, plus at most 1 ns of credit per wait that ends at a full (capped) bucket
    assert -pkt - n * -(-rate_bps // (8 * 10**9)) <= n * pkt - ideal <= pkt


def test_bad_arguments():
    with pytest.raises(ValueError, match="rate_bps"):
        TokenBucket(0, 100)
    tb = TokenBucket(1000, 100)
    tb.refill(50)
    with pytest.raises(ValueError, match="backwards"):
        tb.refill(10)


def test_cc_pacer_follows_the_model_rate_and_window():
    from sw.cc import AckInfo, DcqcnParams, DcqcnRp, Hpcc, HpccParams, IntHop
    from sw.cc.pacer import CcPacer

    rp = DcqcnRp(DcqcnParams(line_rate_kbps=8_000_000, min_rate_kbps=1000))        # 8 Gb/s = 1 B/ns
    pacer = CcPacer(rp, burst_bytes=0)
    assert pacer.try_send(1000, 0)
    assert pacer.next_send_ns(0) == 1000
    pacer.on_cnp(500)                               # rate halves at 500 ns: 500 B still owed at 0.5 B/ns
    assert pacer.bucket.rate_bps == 4_000_000_000
    assert pacer.next_send_ns(500) == 1500
    assert not pacer.try_send(1000, 1499) and pacer.try_send(1000, 1500)

    hp = Hpcc(HpccParams(line_rate_kbps=8_000_000, base_rtt_ns=10_000))         # W = 10_000 B
    hpacer = CcPacer(hp, burst_bytes=1000)
    assert hpacer.next_send_ns(0, inflight_bytes=9_999) == 0
    assert hpacer.next_send_ns(0, inflight_bytes=10_000) is None                  # window closed
    hop0, hop1 = IntHop(0, 0, 0, 8_000_000), IntHop(10_000, 20_000, 0, 8_000_000)  # 2x overload
    hpacer.on_ack(AckInfo(1, 1, (hop0,)), 10)
    hpacer.on_ack(AckInfo(2, 2, (hop1,)), 20)
    assert hpacer.bucket.rate_bps == hp.rate_kbps * 1000 < 8_000_000_000


def test_rate_to_increment_is_within_a_tenth_of_a_percent():
    import random

    from sw.cc.pacer import RateToIncrement

    conv = RateToIncrement()                        # 400 MHz, Q.24 bytes per cycle
    assert conv.mult == 343_597
    assert conv.increment(400_000_000) == 2_097_149_658 < 1 << 31   # 400 Gb/s = 125 B/cycle
    rng = random.Random(8)
    for rate_kbps in [1000, 400_000_000] + [rng.randrange(1000, 400_000_001) for _ in range(100)]:
        assert abs(conv.paced_rate_bps(rate_kbps) / (rate_kbps * 1000) - 1) < 1e-3


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 300)), max_size=40), st.integers(0, 2000))
def test_lazy_refill_equals_per_cycle_refill(steps, burst):
    from sw.cc.pacer import CycleTokenBucket

    inc = 5_000_000                                 # ~0.3 B/cycle in Q.24
    lazy, per_cycle = CycleTokenBucket(inc, burst), CycleTokenBucket(inc, burst)
    for gap, nbytes in steps:
        lazy.advance(gap)
        for _ in range(gap):
            per_cycle.advance(1)
        if nbytes:
            assert lazy.send(nbytes) == per_cycle.send(nbytes)
        assert lazy.credit == per_cycle.credit


def test_cycle_bucket_paces_line_rate_beats():
    from sw.cc.pacer import CycleTokenBucket, RateToIncrement

    conv = RateToIncrement()
    tb = CycleTokenBucket(conv.increment(200_000_000), burst_bytes=128)   # half of 400G: 62.5 B/cycle
    sent = 0
    for _ in range(10_000):
        tb.advance(1)
        if tb.send(128):                            # one 1024-bit beat when eligible
            sent += 128
    assert abs(sent - 625_000) <= 256
    assert tb.cycles_until_eligible() <= 3
