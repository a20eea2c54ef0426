"""The HPCC responder of ``hil run --cc hpcc`` (``sw.apps.hil.peer``): it answers every INT frame, except one arriving
sooner after the last ACK than twice the RTL's HPCC engine's time per ACK (``fabric_run.hpcc_ack_gap_ns``, from the
engine's own clock count), so a slow RTL gets an ACK per frame and a fast one never overruns the engine's event FIFO."""

from __future__ import annotations

import pytest

from sw.apps.hil.peer import RecvOptions, ack_due

pytestmark = pytest.mark.unit


def answered(opts: RecvOptions, arrivals_ns: list[int]) -> list[int]:
    """The arrival times of the INT frames the peer answers, in order."""
    last, out = None, []
    for k, t in enumerate(arrivals_ns, start=1):
        if ack_due(opts, k, t, last):
            last = t
            out.append(t)
    return out


def test_every_frame_slower_than_the_gap_is_answered_and_faster_ones_are_thinned_to_it() -> None:
    opts = RecvOptions(ack_gap_ns=2_930)
    slow = [k * 3_000 for k in range(10)]           # 0.9 Gb/s of 338-byte frames: one ACK per frame
    assert answered(opts, slow) == slow
    fast = [k * 680 for k in range(30)]             # 4 Gb/s: every fifth frame, never two ACKs within the gap
    got = answered(opts, fast)
    assert got == fast[::5]
    assert min(b - a for a, b in zip(got, got[1:], strict=False)) >= 2_930


def test_ack_every_still_counts_frames_and_no_gap_answers_all() -> None:
    assert answered(RecvOptions(ack_every=4), list(range(8))) == [3, 7]
    assert answered(RecvOptions(), [0, 0, 1]) == [0, 0, 1]


def test_the_gap_is_twice_the_engines_time_per_ack_at_four_hops() -> None:
    from dataclasses import asdict

    from hw.nic_top import NicCcTop
    from sw.apps.hil.fabric_run import hpcc_ack_gap_ns
    from sw.apps.hil.model import CLK_NS, HilSizes

    sizes = HilSizes()
    engine = NicCcTop(**asdict(sizes)).hpcc
    gap = hpcc_ack_gap_ns(sizes)
    assert gap >= 2 * engine.ack_ii_clocks(4) * CLK_NS >= 2 * engine.ack_ii_clocks(3) * CLK_NS
    assert gap < (sizes.mtu_bytes + 82) * 8 / 0.9, "an RTL below 0.9 Gb/s (wire) gets an ACK for every frame"
