"""RDMA WRITE then READ back between two fabric NICs over an in-memory wire through P4 pipelines: the shared
set-up and checks of the transport-through-the-fabric unit tests (IPv4 and IPv6)."""

from __future__ import annotations

from typing import Any

import numpy as np

from sw.roce.softnic.loopback import MemoryWire, run_until
from sw.roce.softnic.nic import SoftNic
from sw.roce.transport.qp_connect import connect, qp_info
from sw.roce.transport.verbs import SendWr, WcStatus, WrOpcode


def write_then_read(clock: Any, wire: MemoryWire, a: Any, b: Any, *, ip_a: str, ip_b: str, seed: int,
                    size_bytes: int, cc: str = "none") -> tuple[SoftNic, SoftNic, Any, Any]:
    """WRITE ``size_bytes`` from fabric NIC ``a`` to ``b`` and READ them back; asserts both arrive exactly, the
    forward path carried INT and no frame was malformed.  Returns (nic_a, nic_b, qp_a, qp_b)."""
    nic_a = SoftNic(wire.ports[0], mac=a.mac, ip=ip_a, line_rate_bps=10**9, clock=clock, cc=cc)
    nic_b = SoftNic(wire.ports[1], mac=b.mac, ip=ip_b, line_rate_bps=10**9, clock=clock, cc=cc)
    pd_a, pd_b = nic_a.alloc_pd(), nic_b.alloc_pd()
    cq_a, cq_b = nic_a.create_cq(), nic_b.create_cq()
    qa, qb = nic_a.create_qp(pd_a, cq_a), nic_b.create_qp(pd_b, cq_b)
    # Routed fabric: frames go to the leaf's port MAC (the gateway), not to the peer's MAC.
    connect(qa, 1, qp_info(qb, 2) | {"mac": a.gateway_mac}, path_mtu=1024)
    connect(qb, 2, qp_info(qa, 1) | {"mac": b.gateway_mac}, path_mtu=1024)
    src = np.random.default_rng(seed).integers(0, 256, size_bytes, dtype=np.uint8)
    dst, back = np.zeros_like(src), np.zeros_like(src)
    ms, mb, md = pd_a.reg_mr(src), pd_a.reg_mr(back), pd_b.reg_mr(dst)
    qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, ms.sge(), remote_addr=md.addr, rkey=md.rkey))
    qa.post_send(SendWr(2, WrOpcode.RDMA_READ, mb.sge(), remote_addr=md.addr, rkey=md.rkey))
    assert run_until(clock, wire, [nic_a, nic_b], lambda: len(cq_a) >= 2, 10**9)
    assert [w.status for w in cq_a.poll()] == [WcStatus.SUCCESS, WcStatus.SUCCESS]
    assert np.array_equal(dst, src) and np.array_equal(back, src)
    assert nic_b.counters.int_frames > 0 and nic_b.counters.malformed_frames == 0
    assert nic_a.counters.malformed_frames == 0
    return nic_a, nic_b, qa, qb
