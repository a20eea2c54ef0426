"""cocotb test of hw.parser.RoceParser: Scapy-built RoCEv2 frames (sw.roce) in, CE and CNP events out."""

from __future__ import annotations

import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame
from hwsim import BlockTestbench, tb_params, tb_record
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from sw.roce.wire.flow import ECN_CE, Flow
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.packets import scapy_frame


def tag(frame: bytes, rng: random.Random) -> bytes:
    """The frame with one 802.1Q tag (random PCP/VID) after the MAC addresses."""
    return frame[:12] + b"\x81\x00" + rng.randrange(1 << 16).to_bytes(2, "big") + frame[12:]


def make_frames(rng: random.Random, n: int, qp_mask: int) -> tuple[list[bytes], list[int], list[int], dict]:
    """Mixed IPv4/IPv6, tagged/untagged traffic, the CE / CNP events (destination QP, masked) it must raise in
    order, and how many frames of each layout are RoCE."""
    frames, ce, cnp = [], [], []
    roce = {"ipv4": 0, "ipv6": 0, "vlan": 0}
    for _ in range(n):
        v6, vlan = rng.random() < 0.4, rng.random() < 0.3
        src, dst = ("fd00::1", "fd00::2") if v6 else ("10.0.0.1", "10.0.0.2")
        flow = Flow(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip=src, dst_ip=dst,
                    src_qpn=rng.randrange(1 << 24), dst_qpn=rng.randrange(1 << 24))
        kind = rng.random()
        is_roce = kind < 0.8
        if kind < 0.6:
            ecn = rng.randrange(4)
            frame = scapy_frame(flow, Opcode.SEND_ONLY, psn=rng.randrange(1 << 24), ecn=ecn,
                                payload=bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200))))
            if ecn == ECN_CE:
                ce.append(flow.dst_qpn & qp_mask)
        elif kind < 0.8:
            frame = scapy_frame(flow, Opcode.CNP)
            cnp.append(flow.dst_qpn & qp_mask)
        elif kind < 0.9:  # UDP to another port (or IPv6 with TCP as next header), CE-marked: not RoCE
            l3 = IPv6(src=src, dst=dst, tc=3, nh=17 if rng.random() < 0.5 else 6) if v6 else \
                IP(src=src, dst=dst, tos=3)
            frame = bytes(Ether() / l3 / UDP(dport=53) / bytes(20))
        else:  # runt frame shorter than the RoCE headers
            frame = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 54)))
            vlan = False
        if vlan:
            frame = tag(frame, rng)
        if is_roce:
            roce["vlan" if vlan else "ipv6" if v6 else "ipv4"] += 1
        frames.append(frame)
    return frames, ce, cnp, roce


@cocotb.test()
async def test_parser_events_and_pass_through(dut):
    tp = tb_params()
    rng = random.Random(tp.get("seed", 1))
    tb = BlockTestbench(dut)
    source, sink = tb.axis_source(), tb.axis_sink()
    sink.set_pause_generator(iter(lambda: rng.random() < 0.2, None))
    dut.ce__ready.value = 1
    dut.cnp__ready.value = 1
    await tb.reset()
    frames, want_ce, want_cnp, roce = make_frames(rng, tp["n_frames"], (1 << tp["qp_bits"]) - 1)
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
    tb_record(frames=len(frames), ce=len(got_ce), cnp=len(got_cnp), roce=roce)
    assert got_ce == want_ce, f"CE events {got_ce[:8]} != expected {want_ce[:8]}"
    assert got_cnp == want_cnp, f"CNP events {got_cnp[:8]} != expected {want_cnp[:8]}"
    assert int(dut.roce_pkts.value) == sum(roce.values())
    assert int(dut.dropped.value) == 0
