"""cocotb test of hw.tx_frame.TxFrameBuilder: per-QP templates from sw.roce, payload frames in, complete RoCEv2
frames out, byte-exact against sw.roce.FlowTemplates (lengths, IPv4 checksum, PSN across its 24-bit wrap, ICRC);
first under random backpressure, then back to back (the output must carry a beat every clock)."""

from __future__ import annotations

import random
from pathlib import Path

import cocotb
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiStreamFrame
from hwsim import BlockTestbench, tb_record
from roce_tx_check import tx_flow

from hw.parser import HDR_BYTES
from sw.roce import FlowTemplates, Opcode
from sw.roce.wire.sample_pcaps import write_frames

OPCODES = (Opcode.SEND_ONLY, Opcode.RDMA_WRITE_MIDDLE, Opcode.SEND_MIDDLE)


class TB(BlockTestbench):
    settle_clocks = 3

    def __init__(self, dut) -> None:
        super().__init__(dut)
        self.qp_bits = self.p["qp_bits"]
        self.src = self.axis_source()
        self.sink = self.axis_sink()
        for sig in (dut.desc__valid, dut.tmpl_wr__valid):
            sig.value = 0
        self.out_clocks: list[int] = []
        self.clock = 0

    async def monitor(self) -> None:
        dut = self.dut
        while True:
            await RisingEdge(dut.clk)
            self.clock += 1
            if int(dut.m_axis__tvalid.value) and int(dut.m_axis__tready.value):
                self.out_clocks.append(self.clock)

    async def write_template(self, qp: int, header: bytes) -> None:
        self.dut.tmpl_wr__payload.value = (int.from_bytes(header, "little") << self.qp_bits) | qp
        self.dut.tmpl_wr__valid.value = 1
        while True:
            await RisingEdge(self.dut.clk)
            if int(self.dut.tmpl_wr__ready.value):
                break
        self.dut.tmpl_wr__valid.value = 0

    async def feed(self, jobs: list[tuple[int, bytes]]) -> None:
        """Each payload frame's size on desc, then the frame (desc may run up to the FIFO's depth ahead)."""
        dut = self.dut
        for qp, payload in jobs:
            dut.desc__payload.value = (len(payload) << self.qp_bits) | qp
            dut.desc__valid.value = 1
            while True:
                await RisingEdge(dut.clk)
                if int(dut.desc__ready.value):
                    break
            dut.desc__valid.value = 0
            await self.src.send(AxiStreamFrame(payload, tuser=qp))


@cocotb.test()
async def test_frames_match_the_host_stacks_templates(dut):
    tb = TB(dut)
    cocotb.start_soon(tb.monitor())
    await tb.reset()
    p = tb.p
    rng = random.Random(p["seed"])
    n_qps, bpb = 1 << tb.qp_bits, p["data_width"] // 8
    tpls = {qp: FlowTemplates(tx_flow(qp))[OPCODES[qp % len(OPCODES)]] for qp in range(n_qps)}
    psn = {qp: (1 << 24) - rng.randrange(1, 6) for qp in range(n_qps)}  # wraps within the run
    for qp in range(n_qps):
        await tb.write_template(qp, tpls[qp].build(psn[qp], b"")[:HDR_BYTES])
    # payloads a multiple of 4 (sw.roce pads, the framer does not): around the header and ICRC spill points
    edges = (HDR_BYTES + 4, HDR_BYTES, HDR_BYTES - 4, 4 - bpb, -bpb - 8, -2 * bpb)
    sizes = [4, 8] + [4 * ((bpb - e) // 4) for e in edges]
    want, jobs = [], []
    for i in range(p["n_frames"]):
        qp = rng.randrange(n_qps) if i % 3 else (i // 3) % n_qps
        size = sizes[i % len(sizes)] if i < 2 * len(sizes) else 4 * rng.randrange(1, 3 * bpb // 4)
        payload = bytes(rng.randrange(256) for _ in range(size))
        jobs.append((qp, payload))
        want.append(tpls[qp].build(psn[qp], payload))
        psn[qp] = (psn[qp] + 1) % (1 << 24)
    half = len(jobs) // 2
    tb.sink.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    await tb.feed(jobs[:half])
    got = [await tb.sink.recv() for _ in range(half)]
    tb.sink.clear_pause_generator()
    tb.sink.pause = False  # clearing the generator keeps its last value: a final pause would hold tready low
    first_beat = len(tb.out_clocks)
    await tb.feed(jobs[half:])
    got += [await tb.sink.recv() for _ in range(len(jobs) - half)]
    burst = tb.out_clocks[first_beat:]
    gaps = burst[-1] - burst[0] + 1 - len(burst)
    frames = [bytes(f.tdata) for f in got]
    if p.get("pcap"):
        write_frames(Path(p["pcap"]), frames)
    tb_record(frames=len(frames), burst_beats=len(burst), burst_idle_clocks=gaps,
              wrapped=sum(1 for f in want if f[HDR_BYTES - 3:HDR_BYTES] == b"\0\0\0"))
    for i, (g, w, f) in enumerate(zip(frames, want, got, strict=True)):
        assert g == w, f"frame {i}: {g[:64].hex()} != sw.roce {w[:64].hex()} (lengths {len(g)} {len(w)})"
        user = f.tuser if isinstance(f.tuser, int) else set(f.tuser)
        assert user in (jobs[i][0], {jobs[i][0]}), f"frame {i}: tuser {user} != QP {jobs[i][0]}"
    assert gaps <= 4, f"{gaps} idle clocks in the back-to-back output of {len(burst)} beats"
