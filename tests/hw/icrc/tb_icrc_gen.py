"""cocotb test of hw.icrc.IcrcGenerator: RoCEv2 frames (IPv4, IPv6, 802.1Q) without ICRC in, frames with the
ICRC of sw.roce.wire.icrc out, under backpressure and then back to back; the output frames go to a pcap for tshark."""

from __future__ import annotations

import random
from pathlib import Path

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame
from hwsim import BlockTestbench, tb_params, tb_record

from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.flow import Flow
from sw.roce.wire.icrc import icrc, icrc_bytes
from sw.roce.wire.opcodes import LAYOUTS, Opcode
from sw.roce.wire.packets import scapy_frame
from sw.roce.wire.sample_pcaps import write_frames

ICRC_BYTES = 4
OPCODES = [op for op in LAYOUTS if op != Opcode.CNP] + [Opcode.CNP]


def l3_of(frame: bytes) -> bytes:
    """The IP packet of an Ethernet frame with or without one 802.1Q tag."""
    return frame[18:] if frame[12:14] == b"\x81\x00" else frame[14:]


def make_frames(rng: random.Random, n: int) -> list[bytes]:
    """RoCEv2 frames with their ICRC, cycling over IPv4 / IPv6 x untagged / tagged and all opcodes."""
    frames = []
    for i in range(n):
        v6, vlan = i % 2 == 1, i % 4 >= 2
        src, dst = ("fd00::1", "fd00::2") if v6 else ("10.0.0.1", "10.0.0.2")
        flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", src, dst, rng.randrange(1 << 24),
                    rng.randrange(1 << 24), ttl=rng.randrange(1, 256))
        op = OPCODES[i % len(OPCODES)]
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 400))) \
            if LAYOUTS[op].has_payload else b""
        frame = scapy_frame(flow, op, psn=rng.randrange(1 << 24), ecn=rng.randrange(4), payload=payload,
            ext=HeaderFields(va=rng.randrange(1 << 64), rkey=rng.randrange(1 << 32), dma_len=len(payload)))
        if vlan:
            frame = frame[:12] + b"\x81\x00" + rng.randrange(1 << 16).to_bytes(2, "big") + frame[12:]
        assert icrc(l3_of(frame)) == int.from_bytes(frame[-ICRC_BYTES:], "little")
        frames.append(frame)
    return frames


def with_stray_bytes(rng: random.Random, frames: list[bytes]) -> list[bytes]:
    """Frames lengthened by 1-3 bytes before the ICRC (RoCE frames all end 2 mod 4 bytes before it), so every
    last-beat tkeep occurs; their ICRC is recomputed by sw.roce.wire.icrc."""
    out = []
    for i, frame in enumerate(frames):
        body = frame[:-ICRC_BYTES] + bytes(rng.randrange(256) for _ in range(i % 4))
        out.append(body + icrc_bytes(icrc(l3_of(body) + bytes(ICRC_BYTES))))
    return out


@cocotb.test()
async def test_generator_appends_icrc(dut):
    tp = tb_params()
    rng = random.Random(tp.get("seed", 1))
    tb = BlockTestbench(dut)
    source, sink = tb.axis_source(), tb.axis_sink()
    await tb.reset()
    frames = make_frames(rng, tp["n_frames"])
    odd = with_stray_bytes(rng, frames[: tp["n_frames"] // 2])
    bpb = len(source.bus.tkeep)

    # 1: random backpressure on the output
    sink.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    got = []
    for frame in frames + odd:
        await source.send(AxiStreamFrame(frame[:-ICRC_BYTES]))
    for _ in frames + odd:
        got.append(bytes((await sink.recv()).tdata))
    bad = [i for i, (a, b) in enumerate(zip(got, frames + odd, strict=True)) if a != b]
    assert not bad, f"frames {bad[:8]} differ from sw.roce.wire.icrc"

    # 2: back to back with the output always ready: one output beat per clock, no bubbles
    sink.clear_pause_generator()
    sink.pause = False  # clearing the generator keeps its last value: a final pause would hold tready low
    await ClockCycles(dut.clk, 4)
    want_beats = sum(-(-len(f) // bpb) for f in frames)
    busy, clocks, seen = 0, 0, 0
    for frame in frames:
        await source.send(AxiStreamFrame(frame[:-ICRC_BYTES]))
    while seen < want_beats:
        await RisingEdge(dut.clk)
        fire = int(dut.m_axis__tvalid.value) and int(dut.m_axis__tready.value)
        if fire or seen:
            clocks += 1
        if fire:
            seen += 1
            busy += 1
    back = [bytes((await sink.recv()).tdata) for _ in frames]
    assert back == frames
    write_frames(Path(tp["pcap"]), got)
    tb_record(frames=len(got), ipv4=sum(1 for f in got if l3_of(f)[0] >> 4 == 4),
              ipv6=sum(1 for f in got if l3_of(f)[0] >> 4 == 6), vlan=sum(1 for f in got if f[12:14] == b"\x81\x00"),
              out_beats=busy, out_clocks=clocks,
              last_beat_fill=sorted({(len(f) - ICRC_BYTES) % bpb or bpb for f in frames + odd}))
    assert busy == clocks == want_beats, f"{busy} output beats in {clocks} clocks, expected {want_beats}"
