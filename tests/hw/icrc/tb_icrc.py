"""cocotb test of hw.icrc.IcrcChecker against sw.roce.wire.icrc on Scapy-built RoCEv2 frames (IPv4, IPv6, 802.1Q),
good and corrupted."""

from __future__ import annotations

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame
from hwsim import BlockTestbench, tb_params, tb_record

from sw.roce.wire.flow import Flow
from sw.roce.wire.icrc import icrc, wire_icrc
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.packets import scapy_frame


def l3_of(frame: bytes) -> int:
    """Offset of the IP header: 18 behind an 802.1Q tag, else 14."""
    return 18 if frame[12:14] == b"\x81\x00" else 14


def masked(frame: bytes) -> set[int]:
    """Frame offsets of the router-mutable fields the ICRC ignores (IBTA A17.3.3), plus IPv6's first byte
    (half of it masked)."""
    ip = l3_of(frame)
    if frame[ip] >> 4 == 6:
        udp = ip + 40
        fields = {ip, ip + 1, ip + 2, ip + 3, ip + 7}
    else:
        udp = ip + 20
        fields = {ip + 1, ip + 8, ip + 10, ip + 11}
    return fields | {udp + 6, udp + 7, udp + 12}


def make_frames(rng: random.Random, n: int) -> list[bytes]:
    """Good frames (IPv4/IPv6, with and without an 802.1Q tag), frames with only masked (router-mutable)
    fields changed, and corrupted frames."""
    frames = []
    for _ in range(n):
        v6 = rng.random() < 0.5
        src, dst = ("fd00::1", "fd00::2") if v6 else ("10.0.0.1", "10.0.0.2")
        flow = Flow(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip=src, dst_ip=dst,
                    src_qpn=rng.randrange(1 << 24), dst_qpn=rng.randrange(1 << 24), ttl=rng.randrange(1, 256))
        if rng.random() < 0.2:
            frame = bytearray(scapy_frame(flow, Opcode.CNP))
        else:
            payload = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
            frame = bytearray(scapy_frame(flow, Opcode.SEND_ONLY, psn=rng.randrange(1 << 24),
                                          ecn=rng.randrange(4), payload=payload))
        if rng.random() < 0.5:
            frame[12:12] = b"\x81\x00" + rng.randrange(1 << 16).to_bytes(2, "big")
        r = rng.random()
        mutable = sorted(masked(frame) - {l3_of(frame)})
        if r < 0.25:  # TTL/hop limit, TOS/traffic class, flow label, checksums, FECN/BECN: ICRC still good
            frame[rng.choice(mutable)] ^= 1 << rng.randrange(8)
        elif r < 0.5:  # any covered byte from the IP addresses on (not version/IHL/next header): ICRC bad
            pos = rng.choice([i for i in range(l3_of(frame) + 12, len(frame)) if i not in masked(frame)])
            frame[pos] ^= 1 << rng.randrange(8)
        frames.append(bytes(frame))
    return frames


@cocotb.test()
async def test_icrc_verdicts_match_sw_roce(dut):
    tp = tb_params()
    rng = random.Random(tp.get("seed", 1))
    tb = BlockTestbench(dut)
    source, sink = tb.axis_source(), tb.axis_sink()
    await tb.reset()
    frames = make_frames(rng, tp["n_frames"])
    want = [icrc(f[l3_of(f):]) == wire_icrc(f[l3_of(f):]) for f in frames]
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
    await ClockCycles(dut.clk, 16)  # verdicts come a few pipeline stages after the last beat
    layouts = {"ipv4": sum(1 for f in frames if f[l3_of(f)] >> 4 == 4),
               "ipv6": sum(1 for f in frames if f[l3_of(f)] >> 4 == 6),
               "vlan": sum(1 for f in frames if l3_of(f) == 18)}
    tb_record(frames=len(frames), good=sum(want), layouts=layouts)
    bad = [i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b]
    assert len(got) == len(want) and not bad, f"{len(got)} verdicts for {len(want)} frames, differing {bad[:8]}"
    assert 0 < sum(want) < len(want)
