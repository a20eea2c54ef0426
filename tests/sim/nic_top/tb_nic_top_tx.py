"""cocotb test of nic_cc_top's TX path: templates written over the CSR bus, doorbells, and the RoCEv2 frames on
tx_m_axis byte-exact against sw.roce's templates with the pattern payload (sw.roce.pattern) and the PSNs of each
QP (across the 24-bit wrap), under random backpressure; the TX counters agree."""

from __future__ import annotations

import random
import struct
import time
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamSink
from hwsim import csr_access, ring_doorbell, tb_params, tb_record
from roce_tx_check import tx_flow

from hw.csr import REG_PARAM0, REG_QP_RATE, REG_QP_SEL, REG_TMPL0, REG_TMPL_WR
from hw.nic_top import CC_MODE_NONE, COUNTER_ADDR
from hw.parser import HDR_BYTES
from sw.roce import FlowTemplates, Opcode
from sw.roce.pattern import pattern_payload
from sw.roce.pcap import write_pcap

PSN_MOD = 1 << 24


@cocotb.test()
async def test_frames_are_the_host_stacks(dut):
    p = tb_params()
    rng = random.Random(p["seed"])
    Clock(dut.clk, 2.5, unit="ns").start()
    for sig in (dut.csr_we, dut.csr_re, dut.csr_addr, dut.csr_wdata, dut.doorbell__valid, dut.rx_s_axis__tvalid):
        sig.value = 0
    dut.rx_m_axis__tready.value = 1
    dut.cnp_req__ready.value = 1
    sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "tx_m_axis_"), dut.clk, dut.rst)
    sink.set_pause_generator(iter(lambda: rng.random() < p["pause"], None))
    dut.rst.value = 1
    await ClockCycles(dut.clk, 3)
    dut.rst.value = 0
    await ClockCycles(dut.clk, p["n_qps"] + 4)
    clocks = 0

    async def count() -> None:
        nonlocal clocks
        while True:
            await RisingEdge(dut.clk)
            clocks += 1

    cocotb.start_soon(count())
    wall0 = time.perf_counter()
    await csr_access(dut, REG_PARAM0 + p["param_names"].index("cc_mode"), CC_MODE_NONE)
    mtu, line = p["mtu_bytes"], (p["data_width"] // 8) << 24
    want: dict[int, list[bytes]] = {}
    for i, qp in enumerate(p["qps"]):
        tpl = FlowTemplates(tx_flow(qp))[Opcode.SEND_ONLY]
        ackreq = bool(i % 2)
        psn = (PSN_MOD - p["before_wrap"][i]) % PSN_MOD
        header = tpl.build(psn, b"", ackreq=ackreq)[:HDR_BYTES]
        await csr_access(dut, REG_QP_SEL, qp)
        for k, (word,) in enumerate(struct.iter_unpack(">I", header + bytes(-len(header) % 4))):
            await csr_access(dut, REG_TMPL0 + k, word)
        await csr_access(dut, REG_TMPL_WR, 0)
        await csr_access(dut, REG_QP_RATE, line)
        total = p["bytes"][i]
        sizes = [mtu] * (total // mtu) + ([total % mtu] if total % mtu else [])
        want[qp] = []
        for n in sizes:
            want[qp].append(tpl.build(psn, pattern_payload(qp, psn, n), ackreq=ackreq))
            psn = (psn + 1) % PSN_MOD
    for i, qp in enumerate(p["qps"]):   # all doorbells after all templates: the QPs' frames interleave
        await ring_doorbell(dut, qp, p["bytes"][i], p["qp_bits"])
    n_frames = sum(len(v) for v in want.values())
    got = [await with_timeout(sink.recv(), 200_000, "ns") for _ in range(n_frames)]
    wall = time.perf_counter() - wall0
    frames = [bytes(f.tdata) for f in got]
    write_pcap(Path(p["pcap"]), frames)
    users = [f.tuser if isinstance(f.tuser, int) else f.tuser[0] for f in got]
    seen: dict[int, list[bytes]] = {qp: [] for qp in want}
    for user, data in zip(users, frames, strict=True):
        seen[user].append(data)
    counters = {name: await csr_access(dut, COUNTER_ADDR[name]) for name in ("TX_FRAMES", "TX_PKTS", "TX_BYTES")}
    tb_record(frames=len(frames), clocks=clocks, wall_s=round(wall, 2), clocks_per_s=round(clocks / wall),
              wrapped=sum(1 for v in want.values() for f in v if f[HDR_BYTES - 3:HDR_BYTES] == b"\0\0\0"),
              interleaved=sum(1 for a, b in zip(users, users[1:], strict=False) if a != b), **counters)
    for qp in want:
        assert len(seen[qp]) == len(want[qp]), f"QP {qp}: {len(seen[qp])} frames, want {len(want[qp])}"
        for j, (g, w) in enumerate(zip(seen[qp], want[qp], strict=True)):
            assert g == w, f"QP {qp} frame {j}: {g[:72].hex()} != sw.roce {w[:72].hex()} ({len(g)} vs {len(w)} B)"
    assert counters["TX_FRAMES"] == counters["TX_PKTS"] == n_frames
    assert counters["TX_BYTES"] == sum(p["bytes"])
