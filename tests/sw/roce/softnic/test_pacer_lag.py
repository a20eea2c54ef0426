"""What the NIC pacer counts as late (issue 16): a frame that waited on its token bucket and left after its due
time because the engine came back late; not a frame that something else (the transport's window, PFC, a CNP's
cut rate) held past the time the bucket would have let it go."""

from __future__ import annotations

import pytest

from sw.clock.lag import LagStats, mtu_serialization_ns
from sw.roce.softnic.qp_pacer import QpPacer, make_cc
from sw.units import ETH_WIRE_OVERHEAD_BYTES

pytestmark = pytest.mark.unit

RATE_BPS = 100_000_000            # the fabric's default host link
FRAME_BYTES = 1_066               # a 1024-byte-MTU data frame, no FCS
FRAME_NS = (FRAME_BYTES + ETH_WIRE_OVERHEAD_BYTES) * 8 * 1_000_000_000 // RATE_BPS
BOUND_NS = mtu_serialization_ns(RATE_BPS)
ENGINE_GAP_NS = 5 * BOUND_NS      # an engine that did not run for this long after a frame was due


def _pacer(cc: str = "none") -> tuple[QpPacer, LagStats]:
    lag = LagStats(BOUND_NS)
    return QpPacer(make_cc(cc, RATE_BPS, 0), 0, lag=lag), lag


def _send_first(pacer: QpPacer) -> int:
    """The first frame leaves at 0 (the bucket starts empty, not in deficit); returns the next frame's due time."""
    t = 0
    assert pacer.may_send(t)
    pacer.charge(FRAME_BYTES, t)
    assert not pacer.may_send(t + 1)          # the engine looked right after: the next frame waits on the bucket
    due = pacer.next_send_ns(t + 1)
    assert due is not None and due > t
    return due


def test_an_engine_back_late_is_counted_late() -> None:
    pacer, lag = _pacer()
    due = _send_first(pacer)
    assert due == pytest.approx(FRAME_NS, abs=2)       # one frame time after the first left
    assert pacer.may_send(due + ENGINE_GAP_NS)
    pacer.charge(FRAME_BYTES, due + ENGINE_GAP_NS)
    assert (lag.events, lag.late, lag.max_ns) == (1, 1, ENGINE_GAP_NS)


def test_an_engine_on_time_is_not_late() -> None:
    pacer, lag = _pacer()
    due = _send_first(pacer)
    assert pacer.may_send(due)
    pacer.charge(FRAME_BYTES, due)
    assert (lag.events, lag.late, lag.max_ns) == (1, 0, 0)


def test_a_frame_held_by_the_transport_after_its_due_time_is_not_late() -> None:
    """The engine ran after the frame was due, but the QP could not send (its in-flight window, PFC): it calls
    ``mark_idle``, and the frame that leaves once the window reopens was not waiting on the pacer."""
    pacer, lag = _pacer()
    due = _send_first(pacer)
    pacer.mark_idle()                           # what QueuePair.next_frame / SoftNic._transmit do on a hold
    assert pacer.may_send(due + ENGINE_GAP_NS)
    pacer.charge(FRAME_BYTES, due + ENGINE_GAP_NS)
    assert (lag.events, lag.late) == (0, 0)


def test_a_cnp_pushes_the_due_time_back() -> None:
    """DCQCN cuts the rate while a frame waits: it is due at the later time the cut rate gives, and leaving then
    is on time."""
    pacer, lag = _pacer("dcqcn")
    due = _send_first(pacer)
    pacer.on_cnp(due - 1)
    later = pacer.next_send_ns(due - 1)
    assert later is not None and later > due
    assert not pacer.may_send(due)
    assert pacer.may_send(later)
    pacer.charge(FRAME_BYTES, later)
    assert (lag.events, lag.late, lag.max_ns) == (1, 0, 0)
