# amaranth: UnusedElaboratable=no
"""Amaranth-simulator tests of hw.icrc: generator and checker agree with sw.roce.wire.icrc on IPv4, IPv6 and 802.1Q."""

from __future__ import annotations

import random

import pytest
from amaranth.sim import Simulator

from hw.errors import HwParamError
from hw.icrc import ICRC_BYTES, IcrcChecker, IcrcGenerator, mask_plan
from sw.roce.wire.flow import Flow
from sw.roce.wire.icrc import icrc, icrc_bytes, wire_icrc
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.packets import scapy_frame

pytestmark = pytest.mark.sim

V4 = ("10.0.0.1", "10.0.0.2")
V6 = ("fd00::1", "fd00::2")


def _frame(rng: random.Random, v6: bool, vlan: bool, payload_bytes: int) -> bytes:
    src, dst = V6 if v6 else V4
    flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", src, dst, rng.randrange(1 << 24), rng.randrange(1 << 24))
    frame = scapy_frame(flow, Opcode.SEND_ONLY, psn=rng.randrange(1 << 24), ecn=rng.randrange(4),
                        payload=bytes(rng.randrange(256) for _ in range(payload_bytes)))
    if vlan:
        frame = frame[:12] + b"\x81\x00" + rng.randrange(1 << 16).to_bytes(2, "big") + frame[12:]
    return frame


def _l3(frame: bytes) -> bytes:
    return frame[18:] if frame[12:14] == b"\x81\x00" else frame[14:]


def _frames(seed: int, n: int) -> list[bytes]:
    """IPv4, IPv6, tagged and not, of lengths covering every last-beat tkeep: real RoCE frames all end 2 mod 4
    bytes before the ICRC, so 3 of 4 frames get 1-3 stray bytes there (their ICRC then comes from sw.roce.wire.icrc)."""
    rng = random.Random(seed)
    frames = []
    for i in range(n):
        stray = i % 4
        frame = _frame(rng, rng.random() < 0.5, rng.random() < 0.5, 4 * (i // 4 % 8) + 32 * rng.randrange(3))
        if stray:
            body = frame[:-ICRC_BYTES] + bytes(rng.randrange(256) for _ in range(stray))
            frame = body + icrc_bytes(icrc(_l3(body) + bytes(ICRC_BYTES)))
        frames.append(frame)
    return frames


def _beats(frame: bytes, bpb: int) -> list[tuple[int, int, int]]:
    out = []
    for off in range(0, len(frame), bpb):
        chunk = frame[off:off + bpb]
        out.append((int.from_bytes(chunk, "little"), (1 << len(chunk)) - 1, int(off + bpb >= len(frame))))
    return out


def _run(dut, frames: list[bytes], bpb: int, ready_pattern: list[int]) -> tuple[list[bytes], list[bool]]:
    """Drive ``frames`` back to back into ``dut.s_axis``; collect output frames and checker verdicts."""
    got: list[bytes] = []
    verdicts: list[bool] = []
    sim = Simulator(dut)
    sim.add_clock(2.5e-9)

    async def source(ctx) -> None:
        for frame in frames:
            for data, keep, last in _beats(frame, bpb):
                ctx.set(dut.s_axis.tdata, data)
                ctx.set(dut.s_axis.tkeep, keep)
                ctx.set(dut.s_axis.tlast, last)
                ctx.set(dut.s_axis.tvalid, 1)
                await ctx.tick().until(dut.s_axis.tready)
        ctx.set(dut.s_axis.tvalid, 0)

    async def sink(ctx) -> None:
        cur = b""
        cycle = 0
        while len(got) < len(frames):
            ctx.set(dut.m_axis.tready, ready_pattern[cycle % len(ready_pattern)])
            cycle += 1
            _, _, valid, data, keep, last = await ctx.tick().sample(
                dut.m_axis.tvalid, dut.m_axis.tdata, dut.m_axis.tkeep, dut.m_axis.tlast)
            if hasattr(dut, "done") and ctx.get(dut.done):
                verdicts.append(bool(ctx.get(dut.ok)))
            if valid and ctx.get(dut.m_axis.tready):
                n = bin(keep).count("1")
                assert keep == (1 << n) - 1, f"tkeep {keep:x} is not contiguous"
                cur += data.to_bytes(bpb, "little")[:n]
                if last:
                    got.append(cur)
                    cur = b""
        for _ in range(16):
            await ctx.tick()
            if hasattr(dut, "done") and ctx.get(dut.done):
                verdicts.append(bool(ctx.get(dut.ok)))

    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.run()
    return got, verdicts


@pytest.mark.parametrize("data_width", [64, 128])
def test_generator_appends_golden_icrc(data_width: int) -> None:
    bpb = data_width // 8
    frames = _frames(data_width, 40)
    # every tkeep of the last beat, including the ICRC spilling into a new beat
    assert {len(f[:-ICRC_BYTES]) % bpb for f in frames} == set(range(bpb))
    got, _ = _run(IcrcGenerator(data_width=data_width), [f[:-ICRC_BYTES] for f in frames], bpb, [1, 1, 0, 1])
    assert got == frames
    for frame in got:
        assert icrc(_l3(frame)) == wire_icrc(_l3(frame))


@pytest.mark.parametrize("data_width", [64, 128])
def test_checker_verdicts(data_width: int) -> None:
    frames = _frames(data_width + 1, 24)
    rng = random.Random(data_width)
    sent = []
    for frame in frames:
        f = bytearray(frame)
        if rng.random() < 0.5:  # one covered bit flipped: a payload or BTH byte
            f[rng.randrange(len(f) - 20, len(f))] ^= 1 << rng.randrange(8)
        sent.append(bytes(f))
    want = [icrc(_l3(f)) == wire_icrc(_l3(f)) for f in sent]
    got, verdicts = _run(IcrcChecker(data_width=data_width), sent, data_width // 8, [1])
    assert got == sent and verdicts == want and 0 < sum(want) < len(want)


def test_mask_plan_matches_the_golden_masks() -> None:
    plan = mask_plan()
    assert plan[15][(False, False)] == "ones" and plan[14][(False, True)] == "lo"
    assert plan[19][(True, False)] == "ones" and plan[66][(False, True)] == "ones"  # IPv6 BTH resv8a
    assert all(plan[i][(True, True)] == "zero" for i in range(18))


@pytest.mark.parametrize("cls", [IcrcChecker, IcrcGenerator])
def test_bad_width_is_rejected(cls) -> None:
    with pytest.raises(HwParamError, match="data_width must be a power of two"):
        cls(data_width=96)
