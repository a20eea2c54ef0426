"""Per-priority egress queues on a manual clock: a pause holds one queue only, per-queue depths for RED/INT,
strict priority vs round-robin, one busy queue of eight behaves exactly as a single queue, the commands."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from p4.switch.pfc import PfcManager, int_orig_dscp
from p4.switch.tm import TrafficManager, TrafficManagerError
from sw.units.pfc_frame import build_pfc_frame

pytestmark = pytest.mark.unit

RATE_Bps = 1e6            # 1 MB/s: a 1000-byte frame takes 1 ms


def _shaped(levels: int = 8) -> TrafficManager:
    tm = TrafficManager(priority_levels=levels, default_depth_pkts=1000)
    tm.set_port_rate_Bps(RATE_Bps, 1)
    return tm


def test_pause_of_one_priority_leaves_the_others_the_port() -> None:
    tm = _shaped()
    pfc = PfcManager(tm, lambda *_: None)
    pfc.enable(1, True)
    for i in range(3):
        tm.enqueue(1, f"p3-{i}", 1000, 0, priority=3)
        tm.enqueue(1, f"p0-{i}", 1000, 0, priority=0)
    assert pfc.on_frame(1, build_pfc_frame(bytes(6), {3: 0xFFFF}), 0)   # 1 MB/s port: 33.5 s of pause
    out = tm.dequeue_due(10_000_000)
    assert [q.item for q in out] == ["p0-0", "p0-1", "p0-2"]
    assert [r["paused"] for r in tm.queue_rows(1, 10_000_000)] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert [r["pauses"] for r in tm.queue_rows(1, 10_000_000)] == [0, 0, 0, 1, 0, 0, 0, 0]
    pfc.on_frame(1, build_pfc_frame(bytes(6), {3: 0}), 10_000_000)      # XON
    assert [q.item for q in tm.dequeue_due(20_000_000)] == ["p3-0", "p3-1", "p3-2"]


def test_a_pause_on_a_single_queue_port_holds_everything() -> None:
    """--priority-queues 1 (BMv2's default): every priority shares the one queue, so any pause holds all."""
    tm = _shaped(levels=1)
    pfc = PfcManager(tm, lambda *_: None)
    pfc.enable(1, True)
    tm.enqueue(1, "a", 1000, 0, priority=0)
    tm.enqueue(1, "b", 1000, 0, priority=0)
    pfc.on_frame(1, build_pfc_frame(bytes(6), {3: 0xFFFF}), 0)
    assert tm.dequeue_due(10_000_000) == []                             # priority 0 is held by a pause of 3


def test_queue_depth_metadata_is_per_queue_by_default_and_per_port_on_request() -> None:
    tm = _shaped()
    tm.enqueue(1, "x", 1000, 0, priority=0)
    assert [q.item for q in tm.dequeue_due(0)] == ["x"]        # the port is busy until 1 ms
    for i in range(4):
        tm.enqueue(1, i, 1000, 0, priority=0)
    qp = tm.enqueue(1, "hi", 1000, 0, priority=5)
    assert qp is not None and qp.enq_qdepth_pkts == 0          # its own queue was empty (the port holds 4)
    nxt = tm.dequeue_due(1_000_000)
    assert [q.item for q in nxt] == ["hi"] and nxt[0].deq_qdepth_pkts == 0
    assert [(q.item, q.deq_qdepth_pkts) for q in tm.dequeue_due(2_000_000)] == [(0, 3)]
    tm.set_qdepth_scope("port")
    qp = tm.enqueue(1, "hi2", 1000, 2_000_000, priority=5)
    assert qp is not None and qp.enq_qdepth_pkts == 3          # BMv2: the whole port
    nxt = tm.dequeue_due(3_000_000)
    assert [q.item for q in nxt] == ["hi2"] and nxt[0].deq_qdepth_pkts == 3
    with pytest.raises(TrafficManagerError):
        tm.set_qdepth_scope("bytes")


def test_strict_priority_vs_round_robin_on_a_busy_port() -> None:
    orders = {}
    for sched in ("strict", "rr"):
        tm = _shaped()
        tm.set_scheduler(sched)
        tm.enqueue(1, "first", 1000, 0, priority=0)            # takes the idle port at 0
        for i in range(3):
            for prio in (0, 4, 7):
                tm.enqueue(1, f"{prio}.{i}", 1000, 1, priority=prio)
        orders[sched] = [q.item for q in tm.dequeue_due(100_000_000)]
    assert orders["strict"] == ["first", "7.0", "7.1", "7.2", "4.0", "4.1", "4.2", "0.0", "0.1", "0.2"]
    assert orders["rr"] == ["first", "7.0", "4.0", "0.0", "7.1", "4.1", "0.1", "7.2", "4.2", "0.2"]


def test_scheduler_change_applies_to_a_backlog() -> None:
    tm = _shaped()
    tm.enqueue(1, "first", 1000, 0, priority=0)
    for i in range(3):
        tm.enqueue(1, f"0.{i}", 1000, 1, priority=0)
        tm.enqueue(1, f"6.{i}", 1000, 1, priority=6)
    assert [q.item for q in tm.dequeue_due(1_000_000)] == ["first", "6.0"]     # strict so far
    tm.set_scheduler("rr", 1)                 # round-robin from the highest queue on
    assert [q.item for q in tm.dequeue_due(100_000_000)] == ["6.1", "0.0", "6.2", "0.1", "0.2"]


@settings(max_examples=150, deadline=None)
@given(arrivals=st.lists(st.tuples(st.integers(0, 5_000_000), st.integers(64, 1500), st.integers(0, 2)),
                         min_size=1, max_size=50),
       service=st.lists(st.integers(0, 6_000_000), min_size=1, max_size=8))
def test_one_busy_queue_of_eight_departs_exactly_as_a_single_queue(arrivals, service) -> None:
    """Single-priority traffic on an eight-queue switch: same departures, depths and delays as one queue."""
    results = []
    for levels in (1, 8):
        tm = TrafficManager(priority_levels=levels, default_depth_pkts=20)
        for port in range(3):
            tm.set_port_rate_Bps(RATE_Bps * (port + 1), port)
        events = sorted([(t, 0, n) for n, (t, _, _) in enumerate(arrivals)] + [(t, 1, -1) for t in service])
        out = []
        for t, kind, n in events:
            if kind == 0:
                _, length, port = arrivals[n]
                qp = tm.enqueue(port, n, length, t)
                out.append(("enq", n, None if qp is None else qp.enq_qdepth_pkts))
            else:
                out += [(q.item, q.deq_timestamp_ns, q.deq_qdepth_pkts) for q in tm.dequeue_due(t)]
        out += [(q.item, q.deq_timestamp_ns, q.deq_qdepth_pkts) for q in tm.dequeue_due(10**12)]
        results.append((out, [tm.port_counters(p) for p in range(3)]))
    assert results[0] == results[1]


def test_commands_stats_and_user_errors() -> None:
    tm = _shaped()
    tm.enqueue(1, "a", 1000, 0, priority=2)
    tm.enqueue(1, "b", 1000, 0, priority=2)
    assert tm.execute(["tm_scheduler", "rr", "1"], 0) == ""
    text = tm.execute(["queue_stats", "1"], 0)
    header, row0, row2 = text.splitlines()
    assert header.split() == ["port", "prio", "scheduler", "qdepth_pkts", "high_water_pkts", "enq_pkts", "deq_pkts",
                              "drop_pkts", "pauses", "paused"]
    assert row0.split() == ["1", "0", "rr", "0", "0", "0", "0", "0", "0", "0"]
    assert row2.split() == ["1", "2", "rr", "2", "2", "2", "0", "0", "0", "0"]
    for bad in (["tm_scheduler", "wfq"], ["tm_scheduler", "rr", "x"], ["tm_qdepth_scope"], ["queue_stats", "9"],
                ["queue_stats", "1", "2"]):
        with pytest.raises(TrafficManagerError) as info:
            tm.execute(bad, 0)
        assert info.value.is_user_error and bad[0] in str(info.value)


def test_int_shim_gives_the_original_dscp() -> None:
    ip = bytes([0x45, 0x17 << 2]) + bytes(7) + bytes([17]) + bytes(10)
    udp = bytes(8)
    shim = bytes([0x10, 4, 26, 0])
    frame = bytes(12) + b"\x08\x00" + ip + udp + shim
    assert int_orig_dscp(frame) == 26
    assert int_orig_dscp(bytes(12) + b"\x86\xdd" + bytes(60)) is None
    tm = TrafficManager(priority_levels=8)
    pfc = PfcManager(tm, lambda *_: None)
    pfc.set_dscp_priority(26, 3)
    assert pfc.classify(frame, 0) == 0                 # 0x17 itself is unmapped
    pfc.set_dscp_priority(0x17, "int")
    assert pfc.classify(frame, 0) == 3 and pfc.classify(frame, 5) == 5
    assert pfc.classifying and not pfc.active
