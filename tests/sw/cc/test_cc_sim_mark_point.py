"""Where RED reads the queue (sw.cc.sim ``mark_at``): at dequeue, as fabric.p4 now does, DCQCN keeps an 8 -> 1
incast's link fuller than with marks judged on the depth a packet found on arrival (stale by its queueing delay)."""

from __future__ import annotations

import pytest

from sw.cc import CcParamError
from sw.cc.dcqcn import DcqcnParams
from sw.cc.sim import SimConfig, simulate

pytestmark = pytest.mark.unit

FRAME_BYTES = 1082          # a 1 KiB-MTU RoCE frame: RED thresholds in the incast's packets, as bytes
LINE_KBPS = 10_000_000


def _incast(mark_at: str) -> SimConfig:
    """sw.apps.incast_bench's defaults: 8 x 1 MiB at 10 Gb/s, 2 MB buffer, Kmin 5 / Kmax 45 pkts / Pmax 1 %."""
    dcqcn = DcqcnParams(line_rate_kbps=LINE_KBPS, min_rate_kbps=100_000, rate_ai_kbps=40_000, rate_hai_kbps=100_000,
                        clamp_target_rate=False)
    return SimConfig(n_flows=8, cc="dcqcn", link_kbps=LINE_KBPS, buffer_bytes=2_000_000, kmin_bytes=5 * FRAME_BYTES,
                     kmax_bytes=45 * FRAME_BYTES, pmax=0.01, flow_bytes=1 << 20, duration_ns=100_000_000,
                     to_switch_ns=1_000, to_receiver_ns=1_000, back_ns=2_000, dcqcn=dcqcn, mark_at=mark_at)


def test_dequeue_marking_keeps_the_incast_link_fuller_than_enqueue_marking():
    deq, enq = simulate(_incast("dequeue")), simulate(_incast("enqueue"))
    assert deq.completed == enq.completed == 8 and deq.drops == enq.drops == 0
    assert deq.utilization > enq.utilization + 0.05, (deq.utilization, enq.utilization)
    assert deq.max_queue_bytes < enq.max_queue_bytes          # stale marks let the queue overshoot further
    assert deq.marks < enq.marks                              # ... and then keep marking after it drained


def test_mark_point_is_validated():
    with pytest.raises(CcParamError, match="mark_at"):
        SimConfig(mark_at="ingress")
