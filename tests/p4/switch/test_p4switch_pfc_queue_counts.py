"""Per-queue counters of a switch with eight priority queues are the same on the batched fast path (idle,
unshaped ports: ``process_batch``) and on the per-frame path: each packet is counted in the queue of the
priority the program gave it (qos.p4: UDP -> 7, TCP -> 3, other IP -> 0), never all under queue 0."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether

from p4.switch.pipeline_adapter import load_pipeline
from p4.switch.switch import EmbeddedSwitch, SwitchConfig
from sw.clock import ManualClock
from tests.p4.switch.capture_switch import CapturingSwitch

pytestmark = pytest.mark.unit

QOS_P4 = Path(__file__).resolve().parents[3] / "p4" / "programs" / "qos.p4"
IN_PORT, OUT_PORT = 1, 2
COUNTS = {7: 5, 3: 3, 0: 2}     # priority -> frames sent (UDP, TCP, ICMP)


def _frames() -> list[bytes]:
    base = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP(src="10.0.0.1", dst="10.0.0.2")
    kinds = {7: UDP(sport=1000, dport=2000), 3: TCP(sport=1000, dport=2000), 0: ICMP()}
    out = []
    for prio, n in COUNTS.items():
        out += [bytes(base / kinds[prio] / bytes(100))] * n
    return out


def _switch() -> tuple[EmbeddedSwitch, list[tuple[int, bytes]]]:
    clock = ManualClock()
    sw = CapturingSwitch(load_pipeline(QOS_P4, clock=clock), SwitchConfig(interfaces=[], priority_levels=8), clock)
    sw.execute(f"table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.0.2/32 => 02:00:00:00:00:02 {OUT_PORT}")
    return sw, sw.sent


def _queue_counts(sw: EmbeddedSwitch) -> dict[int, tuple[int, int]]:
    return {r["prio"]: (r["enq_pkts"], r["deq_pkts"]) for r in sw.tm.queue_rows(OUT_PORT, 0) if r["enq_pkts"]}


def test_batched_fast_path_counts_each_packet_in_its_priority_queue() -> None:
    sw, sent = _switch()
    try:
        assert sw._receive_batch(IN_PORT, _frames(), 0) is True     # the pipeline has a batched mode
        assert _queue_counts(sw) == {p: (n, n) for p, n in COUNTS.items()}
        assert sw.tm.port_counters(OUT_PORT)["deq_pkts"] == sum(COUNTS.values())
        assert "  7 " in sw.execute(f"queue_stats {OUT_PORT}")
    finally:
        sw.close()
    assert len(sent) == sum(COUNTS.values())


def test_per_frame_path_counts_the_same() -> None:
    sw, sent = _switch()
    try:
        for frame in _frames():
            sw.receive(IN_PORT, frame, 0)
        assert _queue_counts(sw) == {p: (n, n) for p, n in COUNTS.items()}
    finally:
        sw.close()
    assert len(sent) == sum(COUNTS.values())


def test_one_queue_switch_counts_everything_in_queue_zero() -> None:
    clock = ManualClock()
    sw = CapturingSwitch(load_pipeline(QOS_P4, clock=clock), SwitchConfig(interfaces=[]), clock)
    sw.execute(f"table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.0.2/32 => 02:00:00:00:00:02 {OUT_PORT}")
    try:
        assert sw._receive_batch(IN_PORT, _frames(), 0) is True
        assert _queue_counts(sw) == {0: (sum(COUNTS.values()),) * 2}
    finally:
        sw.close()
