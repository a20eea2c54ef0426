"""cocotb test of hw.icrc.IcrcChecker against sw.roce.icrc on Scapy-built RoCEv2 frames, good and corrupted."""

from __future__ import annotations

import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from hwsim import tb_params, tb_record

from sw.roce.flow import Flow
from sw.roce.icrc import icrc, wire_icrc
from sw.roce.opcodes import Opcode
from sw.roce.packets import scapy_frame


def make_frames(rng: random.Random, n: int) -> list[bytes]:
    """Good frames, frames with only masked (router-mutable) fields changed, and corrupted frames."""
    frames = []
    for _ in range(n):
        flow = Flow(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
                    dst_ip="10.0.0.2", src_qpn=rng.randrange(1 << 24), dst_qpn=rng.randrange(1 << 24),
                    ttl=rng.randrange(1, 256))
        if rng.random() < 0.2:
            frame = bytearray(scapy_frame(flow, Opcode.CNP))
        else:
            payload = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
            frame = bytearray(scapy_frame(flow, Opcode.SEND_ONLY, psn=rng.randrange(1 << 24),
                                          ecn=rng.randrange(4), payload=payload))
        r = rng.random()
        if r < 0.25:  # TTL, TOS/ECN, IP checksum: masked, ICRC still good
            frame[rng.choice([15, 22, 24, 25])] ^= 1 << rng.randrange(8)
        elif r < 0.5:  # any other byte after the Ethernet header: ICRC bad
            pos = rng.choice([i for i in range(14, len(frame)) if i not in (15, 22, 24, 25, 40, 41, 46)])
            frame[pos] ^= 1 << rng.randrange(8)
        frames.append(bytes(frame))
    return frames


@cocotb.test()
async def test_icrc_verdicts_match_sw_roce(dut):
    tp = tb_params()
    rng = random.Random(tp.get("seed", 1))
    Clock(dut.clk, 2.5, unit="ns").start()
    source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis_"), dut.clk, dut.rst)
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis_"), dut.clk, dut.rst)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    frames = make_frames(rng, tp["n_frames"])
    want = [icrc(f[14:]) == wire_icrc(f[14:]) for f in frames]
    got: list[bool] = []

    async def watch() -> None:
        while True:
            await RisingEdge(dut.clk)
            if int(dut.done.value):
                got.append(bool(int(dut.ok.value)))

    cocotb.start_soon(watch())
    for frame in frames:
        await source.send(AxiStreamFrame(frame))
    for _ in frames:
        await sink.recv()
    await ClockCycles(dut.clk, 4)
    tb_record(frames=len(frames), good=sum(want))
    bad = [i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b]
    assert len(got) == len(want) and not bad, f"{len(got)} verdicts for {len(want)} frames, differing {bad[:8]}"
    assert 0 < sum(want) < len(want)
