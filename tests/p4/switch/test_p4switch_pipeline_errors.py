"""A pipeline that raises on a packet (a target bug) costs that packet only: counted, logged, switch goes on."""

from __future__ import annotations

import pytest

from p4.switch.bench import BASIC_P4, udp_frame
from p4.switch.pipeline_adapter import load_pipeline
from p4.switch.switch import EmbeddedSwitch, SwitchConfig
from sw.clock import ManualClock
from sw.units.pfc_frame import build_pfc_frame

pytestmark = pytest.mark.unit


def test_exception_in_the_pipeline_drops_only_that_packet(tmp_path) -> None:
    clock = ManualClock()
    pipe = load_pipeline(BASIC_P4, clock=clock)
    log = tmp_path / "sw.log"
    sw = EmbeddedSwitch(pipe, SwitchConfig(interfaces=[], log_file=str(log)), clock=clock)
    try:
        sw.execute("table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.2.2/32 => 02:00:00:00:00:02 2")
        table = pipe.pipe.tables["MyIngress.ipv4_lpm"]
        (entry,) = table.entries.values()
        entry.data = (None, None)              # corrupt action data: the generated code raises TypeError
        frame = udp_frame(64)
        assert sw._receive_batch(1, [frame] * 3, clock.now_ns())     # batched path
        sw.receive(1, frame, clock.now_ns())                          # per-frame path
        stats = sw.port_stats()
        assert stats[1]["pipeline_error_pkts"] == 4
        assert "raised" in log.read_text()
        sw.execute("table_clear MyIngress.ipv4_lpm")                   # the switch still takes commands
        sw.receive(1, frame, clock.now_ns())
        assert sw.port_stats()[1]["pipeline_drop_pkts"] == 1          # and processes packets normally
    finally:
        sw.close()


def test_exception_on_the_queued_path_drops_only_that_packet(tmp_path) -> None:
    clock = ManualClock()
    pipe = load_pipeline(BASIC_P4, clock=clock)
    sw = EmbeddedSwitch(pipe, SwitchConfig(interfaces=[], log_file=str(tmp_path / "sw.log")), clock=clock)
    try:
        sw.execute("table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.2.2/32 => 02:00:00:00:00:02 2")
        sw.execute("set_port_rate 2 1G")                 # shaped: every packet takes the queued path
        (entry,) = pipe.pipe.tables["MyIngress.ipv4_lpm"].entries.values()
        good = entry.data
        entry.data = (None, None)
        frame = udp_frame(64)
        sw._receive_queued(1, [frame] * 3, clock.now_ns())
        assert sw.port_stats()[1]["pipeline_error_pkts"] == 3 and sw.tm.queued_pkts == 0
        entry.data = good
        sw._receive_queued(1, [frame] * 4, clock.now_ns())
        clock.advance_ns(10_000_000)
        sw._service(clock.now_ns())
        stats = sw.port_stats()
        assert stats[1]["pipeline_error_pkts"] == 3 and sw.tm.queued_pkts == 0
        assert stats[2]["no_port_drop_pkts"] == 4          # all four left egress (port 2 has no interface)
    finally:
        sw.close()


def test_batched_queued_path_counts_like_the_per_frame_path(tmp_path) -> None:
    frames = [udp_frame(64 + k) for k in range(40)]
    stats = []
    for batched in (False, True):
        clock = ManualClock()
        pipe = load_pipeline(BASIC_P4, clock=clock)
        sw = EmbeddedSwitch(pipe, SwitchConfig(interfaces=[], log_file=str(tmp_path / f"sw{batched}.log")), clock=clock)
        try:
            sw.execute("table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.2.2/32 => 02:00:00:00:00:02 2")
            sw.execute("set_queue_depth 8 2")
            sw.execute("set_port_rate 2 1G")             # queue fills within the batch: tail drops too
            for _ in range(3):
                now = clock.now_ns()
                if batched:
                    sw._receive_queued(1, frames, now)
                else:
                    for f in frames:
                        sw.receive(1, f, now)
                        if sw.tm.queued_pkts and sw.tm.has_due(now):
                            sw._service(now)
                clock.advance_ns(3_000)
                sw._service(clock.now_ns())
            clock.advance_ns(10_000_000)
            sw._service(clock.now_ns())
            stats.append((sw.port_stats(), dict(pipe.pipe.drops)))
        finally:
            sw.close()
    assert stats[0] == stats[1]
    port2 = stats[1][0][2]
    assert port2["queue_drop_pkts"] > 0 and port2["no_port_drop_pkts"] > 0 and port2["high_water_pkts"] == 8


def test_mac_control_frames_are_counted_whether_pfc_is_on_or_not(tmp_path) -> None:
    """A bridge consumes MAC control frames (PFC pauses, short or unknown ones too): each counts in
    ``mac_control_pkts`` of its port, on the queued path and with PFC off as well."""
    clock = ManualClock()
    pipe = load_pipeline(BASIC_P4, clock=clock)
    sw = EmbeddedSwitch(pipe, SwitchConfig(interfaces=[], log_file=str(tmp_path / "sw.log")), clock=clock)
    try:
        sw.execute("set_port_rate 2 1G")                 # shaped: the queued path (per-frame MAC control)
        pause = build_pfc_frame(bytes(6), {3: 0xFFFF})
        frames = [pause, pause[:20], pause[:14], pause[:12] + b"\x88\x08\x00\x01" + bytes(44), udp_frame(64)]
        sw._receive_queued(1, frames, clock.now_ns())
        sw.receive(1, pause, clock.now_ns())
        stats = sw.port_stats()[1]
        assert stats["mac_control_pkts"] == 5 and stats["pipeline_error_pkts"] == 0
        assert "mac_control_pkts" in sw.port_stats_text().splitlines()[0].split()
    finally:
        sw.close()
