"""cocotb testbench of hw.sched.TxScheduler: line rate without bubbles, rate accuracy, fairness, framing, and a
clock-by-clock scoreboard of every QP's token bucket against sw.cc.CycleTokenBucket.  With ``frame_overhead_bytes``
(a wire rate: each send charges its length plus the overhead) the model is charged the same, rates are measured in
charged bytes, and one QP at line rate fills the link's payload beats in the share mtu / (mtu + overhead)."""

from __future__ import annotations

import math
import random
import time

import cocotb
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, ValueChange
from hwsim import CLK_NS, BlockTestbench, tb_record

from hw.sched import (
    OP_CLEAR,
    OP_DOORBELL,
    OP_NONE,
    OP_PICK,
    OP_RATE,
    RATE_FRAC_BITS,
    TxScheduler,
    rate_to_reg,
    reg_to_rate_bps,
)
from sw.cc import CycleTokenBucket

CLK_HZ = 400e6
SIZE_KEYS = ("data_width", "n_qps", "mtu_bytes", "burst_bytes", "frame_overhead_bytes")


class TB(BlockTestbench):
    """Owns the clock, reset, the sink on m_axis and the doorbell/rate drivers."""

    settle_clocks = 1

    def __init__(self, dut, *, sink: bool = True) -> None:
        super().__init__(dut)
        self.bpb = self.p["data_width"] // 8
        self.line_reg = self.bpb << RATE_FRAC_BITS
        self.ov = self.p.get("frame_overhead_bytes", 0)
        self.sink = self.axis_sink() if sink else None
        dut.rate_wr__valid.value = 0
        dut.doorbell__valid.value = 0
        if not sink:
            dut.m_axis__tready.value = 1

    async def _push(self, prefix: str, payload: int) -> None:
        valid = getattr(self.dut, f"{prefix}__valid")
        getattr(self.dut, f"{prefix}__payload").value = payload
        valid.value = 1
        while True:
            await RisingEdge(self.dut.clk)
            if getattr(self.dut, f"{prefix}__ready").value:
                break
        valid.value = 0

    async def set_rate(self, qp: int, rate_reg: int) -> None:
        await self._push("rate_wr", (rate_reg << self.p["qp_bits"]) | qp)

    async def doorbell(self, qp: int, n_bytes: int) -> None:
        await self._push("doorbell", (n_bytes << self.p["qp_bits"]) | qp)

    async def departures(self, n: int) -> list[tuple[float, int, int]]:
        """(time in clocks, qp, bytes) of the next ``n`` packet starts, woken only when tx_pkts moves."""
        out = []
        self.seen_pkts = int(self.dut.tx_pkts.value)
        while len(out) < n:
            await ValueChange(self.dut.tx_pkts)
            await ReadOnly()
            count = int(self.dut.tx_pkts.value)
            if count == self.seen_pkts:
                continue  # a simulator may report a change within the time step; only the count matters
            assert count == self.seen_pkts + 1, f"tx_pkts jumped from {self.seen_pkts} to {count}"
            self.seen_pkts = count
            out.append((get_sim_time("ns") / CLK_NS, int(self.dut.tx_last_qp.value),
                        int(self.dut.tx_last_len.value)))
        await RisingEdge(self.dut.clk)  # leave the read-only phase so the caller may drive signals
        return out

    async def busy_cycles(self, n_cycles: int) -> int:
        busy = 0
        for _ in range(n_cycles):
            await RisingEdge(self.dut.clk)
            await ReadOnly()
            busy += int(self.dut.m_axis__tvalid.value) & int(self.dut.m_axis__tready.value)
        return busy


@cocotb.test()
async def test_line_rate_no_bubbles(dut):
    """One QP at rate = line rate, back-to-back full beats: the link never idles once started (with a frame
    overhead: busy mtu / (mtu + overhead) of the clocks, within two packets)."""
    tb = TB(dut, sink=False)
    await tb.reset()
    await tb.set_rate(1, tb.line_reg)
    await tb.doorbell(1, 1 << 30)
    await tb.departures(4)
    cycles = 3000
    t0 = time.perf_counter()
    busy = await tb.busy_cycles(cycles)
    tb_record(monitor_cycles_per_s=cycles / (time.perf_counter() - t0))
    mtu = tb.p["mtu_bytes"]
    if tb.ov:
        want = cycles * mtu / (mtu + tb.ov)
        assert abs(busy - want) <= 2 * mtu / tb.bpb, f"busy {busy} of {cycles} clocks at line rate, want {want:.0f}"
    else:
        assert busy == cycles, f"{cycles - busy} bubbles in {cycles} clocks at line rate"


@cocotb.test()
async def test_oversubscribed_no_bubbles_and_fair(dut):
    """4 QPs at 40 % of line rate each (160 % in sum): no bubbles, equal shares (Jain >= 0.99)."""
    tb = TB(dut, sink=False)
    await tb.reset()
    qps = [0, 2, 5, 7]
    for qp in qps:
        await tb.set_rate(qp, tb.line_reg * 2 // 5)
        await tb.doorbell(qp, 1 << 30)
    await tb.departures(8)
    busy = await tb.busy_cycles(2000)
    assert busy == 2000, f"{2000 - busy} bubbles in 2000 clocks with rates summing to 160 % of line rate"
    deps = await tb.departures(400)
    per_qp = {qp: sum(b for _, q, b in deps if q == qp) for qp in qps}
    xs = list(per_qp.values())
    jain = sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))
    tb_record(jain=jain)
    assert jain >= 0.99, f"Jain index {jain:.4f} < 0.99, bytes per QP {per_qp}"


def _trial_packets(rate_bytes_per_clk: float, mtu: int, window_clk: float, skip: int) -> int:
    return max(skip + 2, int(window_clk * rate_bytes_per_clk / mtu) + skip + 1)


@cocotb.test()
async def test_rate_accuracy(dut):
    """Random rates, log-uniform from 1 Mb/s to line rate: measured rate (charged bytes: payload and overhead)
    within 0.1 % of the requested one."""
    tb = TB(dut, sink=False)
    await tb.reset()
    rng = random.Random(tb.p.get("seed", 1))
    n_rates, mtu, charge = tb.p["n_rates"], tb.p["mtu_bytes"], tb.p["mtu_bytes"] + tb.ov
    line_bps = tb.bpb * 8 * CLK_HZ
    worst = 0.0
    wall0, sim0 = time.perf_counter(), get_sim_time("ns")
    for i in range(n_rates):
        qp = i % tb.p["n_qps"]
        rate_bps = line_bps if i == 0 else 10 ** rng.uniform(6, math.log10(line_bps))
        reg = rate_to_reg(rate_bps, CLK_HZ)
        await tb.set_rate(qp, reg)
        bpc = reg / (1 << RATE_FRAC_BITS)
        skip = tb.p["burst_bytes"] // mtu + 1  # a full bucket leaves as a burst: time what follows it
        n_pkts = _trial_packets(bpc, charge, 20000, skip)
        await tb.doorbell(qp, n_pkts * mtu)
        deps = await tb.departures(n_pkts)
        assert all(q == qp and b == mtu for _, q, b in deps), f"unexpected departures {deps[:4]}"
        span_clk = deps[-1][0] - deps[skip][0]
        measured_bps = (n_pkts - 1 - skip) * charge * 8 * CLK_HZ / span_clk
        err = abs(measured_bps - rate_bps) / rate_bps
        worst = max(worst, err)
        gaps = [round(b[0] - a[0], 2) for a, b in zip(deps, deps[1:], strict=False)]
        assert err <= 1e-3, (f"trial {i} QP {qp} {n_pkts} pkts gaps {gaps[:12]}..{gaps[-6:]}: "
                             f"rate {rate_bps:.6g} b/s (reg {reg}, exact {reg_to_rate_bps(reg, CLK_HZ):.6g}):"
                             f" measured {measured_bps:.6g}, error {err:.3%}")
        await tb.set_rate(qp, 0)
    sim_clk = (get_sim_time("ns") - sim0) / CLK_NS
    tb_record(worst_rate_error=worst, n_rates=n_rates, accuracy_sim_clocks=sim_clk,
              accuracy_clocks_per_s=sim_clk / (time.perf_counter() - wall0))


@cocotb.test()
async def test_segmentation_under_backpressure(dut):
    """Random doorbells on all QPs with a stalling sink: frames are MTU segments, per QP in order, tuser=QP."""
    tb = TB(dut)
    await tb.reset()
    rng = random.Random(7)
    tb.sink.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    n_qps, mtu = tb.p["n_qps"], tb.p["mtu_bytes"]
    expect: dict[int, list[int]] = {qp: [] for qp in range(n_qps)}
    for qp in range(n_qps):
        await tb.set_rate(qp, tb.line_reg)
    for _ in range(40):
        qp, n = rng.randrange(n_qps), rng.randint(1, 3 * mtu)
        await tb.doorbell(qp, n)
        expect[qp].append(n)
    got: dict[int, int] = {qp: 0 for qp in range(n_qps)}
    for _ in range(200):
        if sum(got.values()) == sum(map(sum, expect.values())):
            break
        frame = await tb.sink.recv()
        data = bytes(frame.tdata)
        user = frame.tuser if isinstance(frame.tuser, int) else frame.tuser[0]
        if len(data) > 4:  # the payload's QP field follows a 4-byte sequence number: shorter frames lack it
            qp = int.from_bytes(data[4:6], "little") & (n_qps - 1)
            assert user == qp, f"tuser {user} != QP {qp} in the payload"
        qp = user
        assert 1 <= len(data) <= mtu, f"frame of {len(data)} bytes, MTU {mtu}"
        got[qp] += len(data)
    for qp in range(n_qps):
        assert got[qp] == sum(expect[qp]), f"QP {qp}: sent {got[qp]} bytes, doorbells {sum(expect[qp])}"


def _signed(raw: int, width: int) -> int:
    return raw - (1 << width) if raw >> (width - 1) else raw


@cocotb.test()
async def test_bucket_scoreboard_every_clock(dut):
    """Every clock, the QP the pipeline touches: refilled credit and grant equal sw.cc.CycleTokenBucket's.

    Random rates (0, line rate, above line rate, anything between), random doorbell sizes and a stalling sink;
    the model of each QP is advanced to the clock of every visit, charged on every grant, re-rated on every
    rate write (after refilling at the old rate), exactly as the RTL's lazily refilled memory word.
    """
    tb = TB(dut)
    rng = random.Random(tb.p.get("seed", 1) + 11)
    tb.sink.set_pause_generator(iter(lambda: rng.random() < 0.3, None))
    n_qps, mtu, burst = tb.p["n_qps"], tb.p["mtu_bytes"], tb.p["burst_bytes"]
    tok_width = len(dut.refilled)
    fields = {name: (f.offset, f.width) for name, f in TxScheduler(**{k: tb.p[k] for k in SIZE_KEYS}).op_layout}

    def field(raw: int, name: str) -> int:
        offset, width = fields[name]
        return (raw >> offset) & ((1 << width) - 1)

    models: dict[int, CycleTokenBucket] = {}
    last: dict[int, int] = {}
    pending: dict[int, int] = {}
    stats = {"clocks": 0, "visits": 0, "grants": 0, "deficit_visits": 0}
    errors: list[str] = []

    async def watch() -> None:
        while True:
            await RisingEdge(dut.clk)
            await ReadOnly()
            stats["clocks"] += 1
            rec = int(dut.rec_wb.value)  # the operation writing back this clock
            op = field(rec, "op")
            if op == OP_NONE:
                continue
            q, now = field(rec, "q"), field(rec, "t")
            if op == OP_CLEAR:
                models[q], last[q], pending[q] = CycleTokenBucket(0, burst), now, 0
                continue
            model = models[q]
            model.advance(now - last[q])
            last[q] = now
            stats["visits"] += 1
            rtl_credit = _signed(int(dut.refilled.value), tok_width)
            stats["deficit_visits"] += model.credit <= 0
            if rtl_credit != model.credit:
                errors.append(f"clock {now} QP {q} op {op}: credit RTL {rtl_credit} model {model.credit}")
            arg = field(rec, "arg")
            if op == OP_PICK:
                want = model.eligible() and pending[q] > 0
                got = bool(int(dut.send.value))
                if got != want:
                    errors.append(f"clock {now} QP {q}: grant RTL {got} model {want} (credit {model.credit})")
                if want:
                    n = min(pending[q], mtu)
                    if int(dut.send_len.value) != n:
                        errors.append(f"clock {now} QP {q}: sends {int(dut.send_len.value)} bytes, model {n}")
                    model.send(n + tb.ov)     # the bucket's charge: the send and its frame overhead
                    pending[q] -= n
                    stats["grants"] += 1
            elif op == OP_RATE:
                model.increment = arg
            elif op == OP_DOORBELL:
                pending[q] = min(pending[q] + arg, (1 << 32) - 1)

    cocotb.start_soon(watch())  # before the reset: the clearing pass after it creates the models
    await tb.reset()
    for _ in range(tb.p["n_actions"]):
        qp = rng.randrange(n_qps)
        if rng.random() < 0.35:
            choice = rng.random()
            rate = (0 if choice < 0.1 else tb.line_reg if choice < 0.2 else tb.line_reg + rng.randrange(1, 1 << 20)
                    if choice < 0.25 else rng.randrange(1, tb.line_reg))
            await tb.set_rate(qp, rate)
        else:
            await tb.doorbell(qp, rng.randint(1, 3 * mtu))
        await ClockCycles(dut.clk, rng.randrange(1, 4 * mtu // tb.bpb))
    await ClockCycles(dut.clk, 20 * n_qps)
    tb_record(scoreboard_clocks=stats["clocks"], scoreboard_visits=stats["visits"],
              scoreboard_grants=stats["grants"], scoreboard_deficit_visits=stats["deficit_visits"])
    assert not errors, f"{len(errors)} mismatches, first: {errors[:3]}"
    assert stats["grants"] > 50 and stats["deficit_visits"] > 50, stats
