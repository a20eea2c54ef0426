"""The RC transport through the P4 fabric program (run offline on the embedded target between two in-memory
NICs): the leaf switch routes every frame and leaves an INT stack on it, the NICs strip it and move the data
exactly, and each QP keeps the last INT hops it saw (HPCC's input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.control_plane import switch_commands
from p4.compiler import compile_file
from p4.pipeline import Pipeline
from p4.runtime_cli import RuntimeCLI
from sw.clock import ManualClock
from sw.collectives.fabric_topology import Topology, TopologySpec
from sw.roce.softnic.loopback import LinkProfile, MemoryWire
from tests.sw.roce.transport.fabric_rdma import write_then_read

pytestmark = pytest.mark.unit

FABRIC_P4 = Path(__file__).resolve().parents[4] / "p4" / "programs" / "fabric.p4"


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
    _, _, qa, qb = write_then_read(clock, wire, a, b, ip_a=a.ip, ip_b=b.ip, seed=3, size_bytes=50_000)
    # The responder echoed the forward path's INT in its ACKs (the leaf added no reverse-path hop to them).
    assert qb.resp.int_echoes_sent > 0 and qa.pacer.int_echoes > 0
    echoed = qa.pacer.int_hops(qb.resp.last_echo or [], 1082)
    assert len(echoed) == 1 and qb.resp.last_echo[0].node_id == topo.switch(a.leaf).device_id
