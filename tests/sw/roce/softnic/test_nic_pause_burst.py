"""A PFC pause is not a backlog for the pacer: after a long pause the NIC resumes with at most the idle burst
(two full frames) instead of dumping its whole token bucket, which would cross the switch's XOFF at once."""

from __future__ import annotations

import numpy as np
import pytest

from sw.clock import ManualClock
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.qp_pacer import IDLE_BURST_BYTES
from sw.roce.transport.qp_connect import connect, qp_info
from sw.roce.transport.verbs import SendWr, WrOpcode
from sw.units.pfc_frame import build_pfc_frame
from tests.sw.roce.softnic.mem_port import MemPort

pytestmark = pytest.mark.unit

RATE_BPS = 1_000_000_000
SWITCH_MAC = bytes.fromhex("025046000001")
PACER_BURST_BYTES = 64 * 1024


def _sender(pfc: bool) -> tuple[SoftNic, MemPort, ManualClock]:
    """A NIC with one QP in RTS and a 1 MiB WRITE posted; nothing sent yet."""
    clock = ManualClock()
    port = MemPort()
    opts = {"pfc_priority": 0} if pfc else {}
    nic = SoftNic(port, mac="02:00:00:00:00:01", ip="10.9.0.1", line_rate_bps=RATE_BPS, clock=clock,
              pacer_burst_bytes=PACER_BURST_BYTES, **opts)
    peer = SoftNic(MemPort(), mac="02:00:00:00:00:02", ip="10.9.0.2", line_rate_bps=RATE_BPS, clock=clock)
    pd, cq = nic.alloc_pd(), nic.create_cq()
    qa, qb = nic.create_qp(pd, cq), peer.create_qp(peer.alloc_pd(), peer.create_cq())
    connect(qa, 0, qp_info(qb, 0) | {"mac": "02:00:00:00:00:02"}, path_mtu=1024, timeout=20)
    mr = pd.reg_mr(np.zeros(1 << 20, np.uint8))
    qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, mr.sge(), remote_addr=0, rkey=1))
    return nic, port, clock


def _frames_at_resume(pause_ns: int) -> int:
    """Frames the NIC sends in one instant right after a pause of ``pause_ns`` ended."""
    nic, port, clock = _sender(pfc=True)
    nic.progress()                               # the first frame leaves: the QP is backlogged and paced
    port.rx.append(build_pfc_frame(SWITCH_MAC, {0: 0xFFFF}))
    nic.progress()
    assert nic.pfc is not None and nic.pfc.counters.pauses_rx == 1
    sent_before = len(port.tx)
    clock.advance_ns(pause_ns)
    nic.progress()                               # still paused: nothing leaves
    assert len(port.tx) == sent_before
    port.rx.append(build_pfc_frame(SWITCH_MAC, {0: 0}))  # XON
    nic.progress()
    return len(port.tx) - sent_before


def test_resume_after_a_long_pause_sends_at_most_the_idle_burst() -> None:
    frames = _frames_at_resume(pause_ns=2_000_000)     # 2 ms at 1 Gb/s: the bucket would refill completely
    frame_bytes = 1024 + 58
    assert 1 <= frames <= IDLE_BURST_BYTES // frame_bytes + 1, f"{frames} frames in one burst after the pause"


def test_without_a_pause_a_backlogged_qp_keeps_its_bucket() -> None:
    """Control: a plain scheduling gap (no pause) keeps the credit the pacer earned, up to its burst."""
    nic, port, clock = _sender(pfc=False)
    nic.progress()
    sent_before = len(port.tx)
    clock.advance_ns(2_000_000)
    nic.progress()
    assert len(port.tx) - sent_before > IDLE_BURST_BYTES // (1024 + 58) + 1
