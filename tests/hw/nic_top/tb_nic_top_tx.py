"""cocotb test of nic_cc_top's TX path, driven by the host driver (sw.roce.softnic.rtl_nic_driver): templates written
over
the CSR bus, rates, QP_INIT, doorbells, and the RoCEv2 frames on tx_m_axis byte-exact against sw.roce's templates
with the pattern payload (sw.roce.wire.pattern) and the PSNs of each QP (across the 24-bit wrap), under random
backpressure; the TX counters and QP_RATE read back as written."""

from __future__ import annotations

import random
import time
from pathlib import Path

import cocotb
import pytest
from cocotb.triggers import RisingEdge, with_timeout
from hwsim import BlockTestbench, CocotbNicPort, tb_params, tb_record
from roce_tx_check import tx_flow

from hw.parser import HDR_BYTES
from sw.roce import FlowTemplates, Opcode
from sw.roce.softnic.rtl_nic_driver import RtlNicDriver, RtlNicError
from sw.roce.wire.pattern import pattern_payload
from sw.roce.wire.sample_pcaps import write_frames

PSN_MOD = 1 << 24


@cocotb.test()
async def test_frames_are_the_host_stacks(dut):
    p = tb_params()
    rng = random.Random(p["seed"])
    tb = BlockTestbench(dut)
    for sig in (dut.csr_we, dut.csr_re, dut.csr_addr, dut.csr_wdata, dut.doorbell__valid, dut.rx_s_axis__tvalid):
        sig.value = 0
    dut.rx_m_axis__tready.value = 1
    dut.cnp_req__ready.value = 1
    sink = tb.axis_sink("tx_m_axis_")
    sink.set_pause_generator(iter(lambda: rng.random() < p["pause"], None))
    await tb.reset(settle_clocks=p["n_qps"] + 4)  # the memories' clearing pass
    clocks = 0

    async def count() -> None:
        nonlocal clocks
        while True:
            await RisingEdge(dut.clk)
            clocks += 1

    cocotb.start_soon(count())
    wall0 = time.perf_counter()
    nic = RtlNicDriver(CocotbNicPort(dut, p["qp_bits"]))
    await nic.check_id()
    await nic.set_cc_mode("none")
    assert await nic.param("cc_mode") == 0
    mtu, line = p["mtu_bytes"], (p["data_width"] // 8) << 24
    want: dict[int, list[bytes]] = {}
    for i, qp in enumerate(p["qps"]):
        tpl = FlowTemplates(tx_flow(qp))[Opcode.SEND_ONLY]
        ackreq = bool(i % 2)
        psn = (PSN_MOD - p["before_wrap"][i]) % PSN_MOD
        header = tpl.build(psn, b"", ackreq=ackreq)[:HDR_BYTES]
        await nic.write_template(qp, header)
        await nic.qp_init(qp)
        if i == 0:   # the driver sees the NIC's error flags: a clamped rate, a rejected QP
            assert await nic.set_rate(qp, line + 1)
            with pytest.raises(RtlNicError, match="QP_SEL"):
                await nic.select(p["n_qps"])
        assert not await nic.set_rate(qp, line)
        assert await nic.qp_rate(qp) == line
        total = p["bytes"][i]
        sizes = [mtu] * (total // mtu) + ([total % mtu] if total % mtu else [])
        want[qp] = []
        for n in sizes:
            want[qp].append(tpl.build(psn, pattern_payload(qp, psn, n), ackreq=ackreq))
            psn = (psn + 1) % PSN_MOD
    for i, qp in enumerate(p["qps"]):   # all doorbells after all templates: the QPs' frames interleave
        await nic.ring(qp, p["bytes"][i])
    n_frames = sum(len(v) for v in want.values())
    got = [await with_timeout(sink.recv(), 200_000, "ns") for _ in range(n_frames)]
    wall = time.perf_counter() - wall0
    frames = [bytes(f.tdata) for f in got]
    write_frames(Path(p["pcap"]), frames)
    users = [f.tuser if isinstance(f.tuser, int) else f.tuser[0] for f in got]
    seen: dict[int, list[bytes]] = {qp: [] for qp in want}
    for user, data in zip(users, frames, strict=True):
        seen[user].append(data)
    counters = await nic.counters(("TX_FRAMES", "TX_PKTS", "TX_BYTES"))
    tb_record(frames=len(frames), clocks=clocks, wall_s=round(wall, 2), clocks_per_s=round(clocks / wall),
              wrapped=sum(1 for v in want.values() for f in v if f[HDR_BYTES - 3:HDR_BYTES] == b"\0\0\0"),
              interleaved=sum(1 for a, b in zip(users, users[1:], strict=False) if a != b), **counters)
    for qp in want:
        assert len(seen[qp]) == len(want[qp]), f"QP {qp}: {len(seen[qp])} frames, want {len(want[qp])}"
        for j, (g, w) in enumerate(zip(seen[qp], want[qp], strict=True)):
            assert g == w, f"QP {qp} frame {j}: {g[:72].hex()} != sw.roce {w[:72].hex()} ({len(g)} vs {len(w)} B)"
    assert counters["TX_FRAMES"] == counters["TX_PKTS"] == n_frames
    assert counters["TX_BYTES"] == sum(p["bytes"])
