"""cocotb test of hw.int_ack.IntAckParser: back-to-back frames, one beat per clock, against the host stack's reading.

A random mix of INT-echo ACKs (0..4 hops), plain ACKs, INT ACKs not marked as echo, NAKs and data frames with INT,
CNPs and frames cut short, all built by sw.roce, goes through the tap with no idle clock between frames.  Every
``ack`` event must be exactly what the host stack (``sw.roce.wire.int_md.strip_int`` + ``sw.roce.wire.decode``)
takes as an
INT echo for HPCC, in order, and the frames must come out unchanged.
"""

from __future__ import annotations

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame
from hwsim import BlockTestbench, tb_params, tb_record
from int_ack_stim import IntPath, ack_frame, flow

from hw.int_ack import MAX_INT_HOPS, RAW_HOP
from sw.roce import FlowTemplates, Opcode, decode
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.int_md import carries_int, insert_int, strip_int
from sw.roce.wire.packets import scapy_frame

HOP_BITS = RAW_HOP.size


def host_event(frame: bytes, qp_bits: int) -> tuple | None:
    """What the host takes from ``frame`` as an INT echo for HPCC: (qp, psn, n, ((occupancy, ts, tx), ...))."""
    if not carries_int(frame):
        return None
    try:
        plain, records = strip_int(frame)
        pkt = decode(plain)
    except RoceFormatError:
        return None
    if not records.echoed or pkt.opcode != Opcode.ACKNOWLEDGE or (pkt.syndrome >> 5) & 3:
        return None
    return (pkt.dest_qp & ((1 << qp_bits) - 1), pkt.psn, len(records),
            tuple((r.queue_occupancy, r.egress_timestamp, r.egress_tx_bytes) for r in records))


def dut_event(raw: int, qp_bits: int) -> tuple:
    qp = raw & ((1 << qp_bits) - 1)
    psn = (raw >> qp_bits) & 0xFFFFFF
    n = (raw >> (qp_bits + 24)) & 7
    base = qp_bits + 27
    hops = []
    for h in range(n):
        word = raw >> (base + h * HOP_BITS)
        hops.append((word & 0xFFFFFF, (word >> 24) & ((1 << 64) - 1), (word >> 88) & 0xFFFF_FFFF))
    return qp, psn, n, tuple(hops)


def make_frames(rng: random.Random, n: int) -> list[bytes]:
    frames = []
    for _ in range(n):
        qp, psn = rng.randrange(1 << 10), rng.randrange(1 << 24)
        path = IntPath(rng, rng.randint(1, MAX_INT_HOPS), 100_000_000, 4154, 125_000)
        roll = rng.random()
        if roll < 0.55:
            frame = ack_frame(qp, psn, path.next_records()[:rng.randint(0, MAX_INT_HOPS)])
        elif roll < 0.62:
            frame = ack_frame(qp, psn, None)
        elif roll < 0.68:
            frame = ack_frame(qp, psn, path.next_records(), echo=False)
        elif roll < 0.74:
            frame = ack_frame(qp, psn, path.next_records(), syndrome=0x60)  # NAK (PSN sequence error)
        elif roll < 0.82:
            data = FlowTemplates(flow(qp))[Opcode.SEND_ONLY].build(psn, bytes(rng.randrange(0, 300)))
            frame = insert_int(data, path.next_records(), echo=False, remaining_hop_cnt=2)
        elif roll < 0.88:
            frame = scapy_frame(flow(qp), Opcode.CNP)
        else:
            whole = ack_frame(qp, psn, path.next_records())
            frame = whole[:rng.randrange(60, len(whole))]  # cut short
        frames.append(frame)
    return frames


@cocotb.test()
async def test_int_echo_acks_become_events_like_the_host_reads_them(dut):
    p = tb_params()
    qp_bits = p["qp_bits"]
    tb = BlockTestbench(dut)
    src, sink = tb.axis_source(), tb.axis_sink()
    dut.ack__ready.value = 1
    await tb.reset(settle_clocks=2)
    events: list[tuple] = []

    async def watch() -> None:
        while True:
            await RisingEdge(dut.clk)
            if int(dut.ack__valid.value):
                events.append(dut_event(int(dut.ack__payload.value), qp_bits))

    cocotb.start_soon(watch())
    rng = random.Random(p["seed"])
    frames = make_frames(rng, p["frames"])
    for frame in frames:
        await src.send(AxiStreamFrame(frame))
    out = [bytes((await sink.recv()).tdata) for _ in frames]
    await ClockCycles(dut.clk, 4)
    want = [e for e in (host_event(f, qp_bits) for f in frames) if e is not None]
    tb_record(frames=len(frames), int_acks=len(want), events=len(events),
              hops=sum(e[2] for e in want))
    assert out == frames, "a frame did not pass through unchanged"
    assert events == want, f"events {events[:3]} != host {want[:3]}"
    assert int(dut.int_acks.value) == len(want) and int(dut.dropped.value) == 0
    assert len(want) > len(frames) // 3
