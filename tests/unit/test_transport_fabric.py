"""The RC transport through the P4 fabric program (run offline on the embedded target between two in-memory
NICs): the leaf switch routes every frame and leaves an INT stack on it, the NICs strip it and move the data
exactly, and each QP keeps the last INT hops it saw (HPCC's input)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from emu.control import switch_commands
from emu.topology import Topology, TopologySpec
from p4.compiler import compile_file
from p4.pipeline import Pipeline
from p4.runtime_cli import RuntimeCLI
from sw.clock import ManualClock
from sw.roce.nic import Nic
from sw.roce.nic_loopback import LinkProfile, MemoryWire, run_until
from sw.roce.qp_connect import connect, qp_info
from sw.roce.verbs import SendWr, WcStatus, WrOpcode

pytestmark = pytest.mark.unit

FABRIC_P4 = Path(__file__).resolve().parents[2] / "p4" / "programs" / "fabric.p4"


def test_write_and_read_through_the_leaf_switch_with_int_left_on_every_frame():
    topo = Topology(TopologySpec(servers=2, gpus_per_server=2, spines=2))
    a, b = topo.nics_of("s0")[0], topo.nics_of("s1")[0]  # same rail: one leaf between them
    clock = ManualClock(start_ns=1_000_000)
    leaf = Pipeline(compile_file(FABRIC_P4), clock=clock, device_id=topo.switch(a.leaf).device_id)
    cli = RuntimeCLI(leaf)
    for line in switch_commands(topo, a.leaf):
        cli.execute(line)

    def through_leaf(in_port: int, out_port: int):
        def forward(frame: bytes) -> bytes:
            out, _ = leaf.process(in_port, frame)
            ((port, routed),) = out
            assert port == out_port
            return routed

        return forward

    wire = MemoryWire(
        clock,
        LinkProfile(transform=through_leaf(a.leaf_port, b.leaf_port)),
        LinkProfile(transform=through_leaf(b.leaf_port, a.leaf_port)),
    )
    nic_a = Nic(wire.ports[0], mac=a.mac, ip=a.ip, line_rate_bps=10**9, clock=clock)
    nic_b = Nic(wire.ports[1], mac=b.mac, ip=b.ip, line_rate_bps=10**9, clock=clock)
    pd_a, pd_b = nic_a.alloc_pd(), nic_b.alloc_pd()
    cq_a, cq_b = nic_a.create_cq(), nic_b.create_cq()
    qa, qb = nic_a.create_qp(pd_a, cq_a), nic_b.create_qp(pd_b, cq_b)
    # Routed fabric: frames go to the leaf's port MAC (the gateway), not to the peer's MAC.
    connect(qa, 1, qp_info(qb, 2) | {"mac": a.gateway_mac}, path_mtu=1024)
    connect(qb, 2, qp_info(qa, 1) | {"mac": b.gateway_mac}, path_mtu=1024)
    src = np.random.default_rng(3).integers(0, 256, 50_000, dtype=np.uint8)
    dst, back = np.zeros_like(src), np.zeros_like(src)
    ms, mb, md = pd_a.reg_mr(src), pd_a.reg_mr(back), pd_b.reg_mr(dst)
    qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, ms.sge(), remote_addr=md.addr, rkey=md.rkey))
    qa.post_send(SendWr(2, WrOpcode.RDMA_READ, mb.sge(), remote_addr=md.addr, rkey=md.rkey))
    assert run_until(clock, wire, [nic_a, nic_b], lambda: len(cq_a) >= 2, 10**9)
    assert [w.status for w in cq_a.poll()] == [WcStatus.SUCCESS, WcStatus.SUCCESS]
    assert np.array_equal(dst, src) and np.array_equal(back, src)
    assert nic_b.counters.int_frames > 0 and nic_b.counters.malformed_frames == 0
    assert nic_a.counters.malformed_frames == 0
    # The responder echoed the forward path's INT in its ACKs (the leaf added no reverse-path hop to them).
    assert qb.resp.int_echoes_sent > 0 and qa.pacer.int_echoes > 0
    echoed = qa.pacer.int_hops(qb.resp.last_echo or [], 1082)
    assert len(echoed) == 1 and qb.resp.last_echo[0].node_id == topo.switch(a.leaf).device_id
