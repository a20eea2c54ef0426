"""The traffic manager on a manual clock: shaping, tail drop, queue metadata, strict priority, high-water marks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p4.switch.tm import TrafficManager, TrafficManagerError
from sw.clock import ManualClock

pytestmark = pytest.mark.unit


def test_unlimited_rate_departs_at_once_with_zero_depth() -> None:
    tm = TrafficManager()
    qp = tm.enqueue(1, "a", 100, now_ns=5)
    assert qp is not None and qp.enq_qdepth_pkts == 0
    out = tm.dequeue_due(5)
    assert [q.item for q in out] == ["a"]
    assert out[0].deq_qdepth_pkts == 0 and out[0].deq_timedelta_ns == 0
    assert tm.next_departure_ns() is None


def test_rate_pps_spaces_departures_and_reports_real_queue_state() -> None:
    clock = ManualClock()
    tm = TrafficManager()
    tm.set_queue_rate(1000, port=2)           # 1 ms per packet
    for i in range(4):
        qp = tm.enqueue(2, i, 64, clock.now_ns())
        assert qp is not None and qp.enq_qdepth_pkts == i
    first = tm.dequeue_due(clock.now_ns())
    assert [q.item for q in first] == [0]
    assert first[0].deq_qdepth_pkts == 3
    assert tm.next_departure_ns() == 1_000_000
    clock.advance_ns(999_999)
    assert tm.dequeue_due(clock.now_ns()) == []
    clock.advance_ns(1)
    second = tm.dequeue_due(clock.now_ns())
    assert [(q.item, q.deq_qdepth_pkts, q.deq_timedelta_ns) for q in second] == [(1, 2, 1_000_000)]
    clock.advance_ns(10_000_000)              # late: the backlog leaves at its scheduled times
    rest = tm.dequeue_due(clock.now_ns())
    assert [(q.item, q.deq_timestamp_ns) for q in rest] == [(2, 2_000_000), (3, 3_000_000)]
    assert tm.port_counters(2)["high_water_pkts"] == 4


def test_tail_drop_counts_exactly_the_overflow() -> None:
    tm = TrafficManager()
    tm.set_queue_rate(1, port=1)
    tm.set_queue_depth(5, port=1)
    accepted = [tm.enqueue(1, i, 64, 0) for i in range(12)]
    assert sum(a is not None for a in accepted) == 5
    counters = tm.port_counters(1)
    assert counters["queue_drop_pkts"] == 7 and counters["enq_pkts"] == 5 and counters["qdepth_pkts"] == 5


def test_byte_rate_shaper_serializes_by_length() -> None:
    tm = TrafficManager()
    tm.set_port_rate_Bps(1_000_000, port=3)   # 1 MB/s: 1000 B take 1 ms
    tm.enqueue(3, "big", 1000, 0)
    tm.enqueue(3, "small", 100, 0)
    tm.enqueue(3, "next", 100, 0)
    assert [q.item for q in tm.dequeue_due(0)] == ["big"]
    assert tm.next_departure_ns() == 1_000_000
    assert [q.item for q in tm.dequeue_due(1_000_000)] == ["small"]
    assert tm.next_departure_ns() == 1_100_000


def test_strict_priority_serves_higher_value_first_on_a_shaped_port() -> None:
    tm = TrafficManager(priority_levels=8)
    tm.set_queue_rate(1000, port=1)
    tm.enqueue(1, "low0", 64, 0, priority=0)  # leaves at once: the port was idle
    tm.enqueue(1, "low1", 64, 0, priority=0)
    tm.enqueue(1, "high", 64, 10, priority=7)
    tm.enqueue(1, "mid", 64, 20, priority=3)
    order = [q.item for q in tm.dequeue_due(10_000_000)]
    assert order == ["low0", "high", "mid", "low1"]


def test_ports_are_independent_and_departures_in_time_order() -> None:
    tm = TrafficManager()
    tm.set_queue_rate(1000, port=1)
    tm.set_queue_rate(400, port=2)            # 2.5 ms per packet
    for i in range(3):
        tm.enqueue(1, f"p1-{i}", 64, 0)
        tm.enqueue(2, f"p2-{i}", 64, 0)
    out = tm.dequeue_due(10_000_000)
    times = [q.deq_timestamp_ns for q in out]
    assert times == sorted(times)
    assert [q.item for q in out if q.egress_port == 2] == ["p2-0", "p2-1", "p2-2"]
    assert [q.deq_timestamp_ns for q in out if q.egress_port == 2] == [0, 2_500_000, 5_000_000]


def test_dequeue_limit_and_reconfiguration() -> None:
    tm = TrafficManager()
    for i in range(10):
        tm.enqueue(4, i, 64, 0)
    assert len(tm.dequeue_due(0, limit=3)) == 3
    tm.set_queue_rate(None, port=4)
    assert [q.item for q in tm.dequeue_due(0)] == list(range(3, 10))


@pytest.mark.parametrize("call", [
    lambda tm: tm.set_queue_depth(0),
    lambda tm: tm.set_queue_rate(0, port=1),
    lambda tm: tm.set_queue_rate(10, port=1, priority=1),
    lambda tm: tm.set_port_rate_Bps(-5, port=1),
])
def test_bad_settings_are_user_errors(call) -> None:
    tm = TrafficManager()
    with pytest.raises(TrafficManagerError) as info:
        call(tm)
    assert info.value.is_user_error


def test_cut_through_only_when_the_port_is_idle_and_unshaped() -> None:
    tm = TrafficManager()
    qp = tm.cut_through(1, "a", 64, now_ns=7)
    assert qp is not None and (qp.enq_qdepth_pkts, qp.deq_qdepth_pkts, qp.deq_timedelta_ns) == (0, 0, 0)
    assert tm.port_counters(1)["deq_pkts"] == 1 and tm.queued_pkts == 0
    tm.set_queue_rate(10, port=1)
    assert tm.cut_through(1, "b", 64, now_ns=8) is None            # shaped: must queue
    tm.enqueue(1, "b", 64, 8)
    tm.enqueue(1, "c", 64, 8)
    tm.set_queue_rate(None, port=1)
    assert tm.cut_through(1, "d", 64, now_ns=9) is None            # backlog first, never overtaken
    assert [q.item for q in tm.dequeue_due(9)] == ["b", "c"]
    assert tm.cut_through(1, "e", 64, now_ns=10) is not None




@settings(max_examples=200, deadline=None)
@given(arrivals=st.lists(st.tuples(st.integers(0, 3_000_000), st.integers(0, 2)), min_size=1, max_size=60),
       rates=st.lists(st.one_of(st.none(), st.integers(100, 5000)), min_size=3, max_size=3))
def test_departures_match_a_reference_fifo_per_port(arrivals, rates) -> None:
    """Whatever the interleaving of arrivals and service calls, each port's packets leave at
    max(arrival, previous departure + 1/rate), in order, and the global stream is in time order."""
    tm = TrafficManager(default_depth_pkts=1000)
    for port, rate in enumerate(rates):
        tm.set_queue_rate(rate, port=port)
    arrivals = sorted(arrivals, key=lambda a: a[0])
    out = []
    for i, (t, port) in enumerate(arrivals):
        out += tm.dequeue_due(t)
        tm.enqueue(port, i, 64, t)
    out += tm.dequeue_due(10**12)
    assert sorted(q.item for q in out) == list(range(len(arrivals)))
    times = [q.deq_timestamp_ns for q in out]
    assert times == sorted(times)
    for port, rate in enumerate(rates):
        expect, prev = [], None
        for t, p in arrivals:
            if p == port:
                dep = t if prev is None or rate is None else max(t, prev + 1_000_000_000 // rate)
                expect.append(dep)
                prev = dep
        assert [q.deq_timestamp_ns for q in out if q.egress_port == port] == expect


def test_line_rate_shaper_can_count_ethernet_overhead() -> None:
    tm = TrafficManager()
    tm.set_port_rate_Bps(1_000_000, port=1, overhead_bytes=24)   # 8 Mb/s: 64 B + 24 B = 88 us on the wire
    for i in range(3):
        tm.enqueue(1, i, 64, 0)
    assert [q.deq_timestamp_ns for q in tm.dequeue_due(10**9)] == [0, 88_000, 176_000]
    with pytest.raises(TrafficManagerError):
        tm.set_port_rate_Bps(1_000_000, port=1, overhead_bytes=-1)


def test_depth_percentiles_weigh_each_depth_by_the_network_time_it_held() -> None:
    tm = TrafficManager()
    tm.set_queue_rate(1000, port=2)           # 1 ms per packet
    for i in range(4):
        tm.enqueue(2, i, 64, 0)               # depth 4 at t=0, held no time: the peak, not a percentile
    assert [q.item for q in tm.dequeue_due(0)] == [0]
    assert len(tm.dequeue_due(10_000_000)) == 3   # depths 3, 2, 1 held 1 ms each, then empty at 3 ms
    c = tm.port_counters(2)
    assert (c["high_water_pkts"], c["queue_p50_pkts"], c["queue_p99_pkts"]) == (4, 2, 3)
    assert tm.depth_percentile_pkts(2, 0.2) == 1 and tm.depth_percentile_pkts(9, 0.99) == 0
    tm.enqueue(2, "late", 64, 100_000_000)    # 97 ms empty between: a time-weighted median of 0
    assert tm.depth_percentile_pkts(2, 0.5) == 0 and tm.depth_percentile_pkts(2, 0.99) == 2
    tm.dequeue_due(100_000_000)
    tm.reset_counters()                       # starts again at the next depth change: the idle head not counted
    tm.enqueue(2, "a", 64, 300_000_000)
    tm.enqueue(2, "b", 64, 300_000_000)
    tm.dequeue_due(302_000_000)
    c = tm.port_counters(2)
    assert (c["high_water_pkts"], c["queue_p50_pkts"], c["queue_p99_pkts"]) == (2, 1, 1)


def test_depth_histogram_grows_with_a_deeper_queue_and_ignores_out_of_order_departures() -> None:
    tm = TrafficManager(default_depth_pkts=4)
    tm.set_queue_depth(3000, port=1)
    tm.set_queue_rate(1000, port=1)
    for i in range(2500):
        assert tm.enqueue(1, i, 64, i) is not None   # one arrival per ns: depth k held 1 ns
    tm.enqueue(1, "x", 64, 1_000_000)             # depth 2500 held until 1 ms (the first departure was due at 0)
    assert tm.depth_percentile_pkts(1, 0.99) == 2500
    out = tm.dequeue_due(1_000_000)               # due at 0 and 1 ms: the one before the last arrival adds no time
    assert [q.deq_timestamp_ns for q in out] == [0, 1_000_000]
    assert tm.port_counters(1)["queue_p50_pkts"] == 2500 and tm.port_counters(1)["high_water_pkts"] == 2501
