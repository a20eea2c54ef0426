"""cocotb test of hw.parser.RoceParser: Scapy-built RoCEv2 frames (sw.roce) in, CE and CNP events out."""

from __future__ import annotations

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from hwsim import tb_params, tb_record
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from sw.roce.flow import ECN_CE, Flow
from sw.roce.opcodes import Opcode
from sw.roce.packets import scapy_frame


def make_frames(rng: random.Random, n: int, qp_mask: int) -> tuple[list[bytes], list[int], list[int]]:
    """Mixed traffic and the CE / CNP events (destination QP, masked) it must raise, in order."""
    frames, ce, cnp = [], [], []
    for _ in range(n):
        flow = Flow(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
                    dst_ip="10.0.0.2", src_qpn=rng.randrange(1 << 24), dst_qpn=rng.randrange(1 << 24))
        kind = rng.random()
        if kind < 0.6:
            ecn = rng.randrange(4)
            frames.append(scapy_frame(flow, Opcode.SEND_ONLY, psn=rng.randrange(1 << 24), ecn=ecn,
                                      payload=bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))))
            if ecn == ECN_CE:
                ce.append(flow.dst_qpn & qp_mask)
        elif kind < 0.8:
            frames.append(scapy_frame(flow, Opcode.CNP))
            cnp.append(flow.dst_qpn & qp_mask)
        elif kind < 0.9:  # UDP to another port, CE-marked: not RoCE
            frames.append(bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2", tos=3) / UDP(dport=53)
                                / bytes(20)))
        else:  # runt frame shorter than the RoCE headers
            frames.append(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 54))))
    return frames, ce, cnp


@cocotb.test()
async def test_parser_events_and_pass_through(dut):
    tp = tb_params()
    rng = random.Random(tp.get("seed", 1))
    Clock(dut.clk, 2.5, unit="ns").start()
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_"), dut.clk, dut.rst)
    sink.set_pause_generator(iter(lambda: rng.random() < 0.2, None))
    dut.ce__ready.value = 1
    dut.cnp__ready.value = 1
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    frames, want_ce, want_cnp = make_frames(rng, tp["n_frames"], (1 << tp["qp_bits"]) - 1)
    got_ce: list[int] = []
    got_cnp: list[int] = []

    async def watch() -> None:
        while True:
            await RisingEdge(dut.clk)
            if int(dut.ce__valid.value):
                got_ce.append(int(dut.ce__payload.value))
            if int(dut.cnp__valid.value):
                got_cnp.append(int(dut.cnp__payload.value))

    cocotb.start_soon(watch())
    for frame in frames:
        await source.send(AxiStreamFrame(frame))
    for frame in frames:
        rx = await sink.recv()
        assert bytes(rx.tdata) == frame, "frame changed on its way through the parser"
    await ClockCycles(dut.clk, 4)
    tb_record(frames=len(frames), ce=len(got_ce), cnp=len(got_cnp))
    assert got_ce == want_ce, f"CE events {got_ce[:8]} != expected {want_ce[:8]}"
    assert got_cnp == want_cnp, f"CNP events {got_cnp[:8]} != expected {want_cnp[:8]}"
    assert int(dut.roce_pkts.value) == sum(1 for f in frames if len(f) >= 58 and f[36:38] == b"\x12\xb7")
    assert int(dut.dropped.value) == 0
