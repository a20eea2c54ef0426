"""Two NIC processes on one interface (a rank's and another tenant's, the fault injector's ``congest``) see each
other's frames: the tenant's NIC numbers its QPs from ``first_qpn``, so a frame for the rank's QP reaches none of
its QPs and is dropped quietly as ``unknown_qp_frames`` (and the other way round); a first QPN outside the 24-bit
range above the reserved ones is refused."""

from __future__ import annotations

import numpy as np
import pytest

from emu.tenant import TENANT_FIRST_QPN
from sw.clock import ManualClock
from sw.roce.softnic.nic import FIRST_QPN, MAX_QPN, SoftNic
from sw.roce.transport.qp_connect import connect, qp_info
from sw.roce.transport.verbs import SendWr, WrOpcode
from tests.sw.roce.softnic.mem_port import MemPort

pytestmark = pytest.mark.unit

RATE_BPS = 1_000_000_000


def _nic(clock: ManualClock, ip: str, **opts: int) -> SoftNic:
    return SoftNic(MemPort(ip=ip), mac="02:00:00:00:00:0" + ip[-1], ip=ip, line_rate_bps=RATE_BPS, clock=clock,
                   **opts)


def test_a_tenant_nic_beside_a_rank_drops_the_ranks_frames_as_unknown_qp() -> None:
    clock = ManualClock()
    sender = _nic(clock, "10.9.0.1")
    rank = _nic(clock, "10.9.0.2")
    tenant = _nic(clock, "10.9.0.2", first_qpn=TENANT_FIRST_QPN)      # the same interface's address
    rank_qp = rank.create_qp(rank.alloc_pd(), rank.create_cq())
    tenant_qp = tenant.create_qp(tenant.alloc_pd(), tenant.create_cq())
    assert rank_qp.qp_num == FIRST_QPN and tenant_qp.qp_num == TENANT_FIRST_QPN
    pd, cq = sender.alloc_pd(), sender.create_cq()
    qp = sender.create_qp(pd, cq)
    connect(qp, 0, qp_info(rank_qp, 0) | {"mac": "02:00:00:00:00:02"}, path_mtu=1024, timeout=20)
    mr = pd.reg_mr(np.zeros(4096, np.uint8))
    qp.post_send(SendWr(1, WrOpcode.RDMA_WRITE, mr.sge(), remote_addr=0, rkey=1))
    sender.progress()
    frames = sender.port.tx
    assert frames
    tenant.port.rx.extend(frames)                 # the tenant's socket sees the rank's frames too
    tenant.progress()
    assert tenant.counters.unknown_qp_frames == len(frames) and tenant.counters.qp_frames == 0
    assert tenant_qp.counters.rx_packets == 0


@pytest.mark.parametrize("first", [0, FIRST_QPN - 1, MAX_QPN + 1])
def test_a_first_qpn_out_of_range_is_refused(first: int) -> None:
    with pytest.raises(ValueError, match="first QPN"):
        _nic(ManualClock(), "10.9.0.3", first_qpn=first)
