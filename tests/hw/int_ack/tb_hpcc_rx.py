"""cocotb scoreboard of the NIC's HPCC receive path (IntAckParser -> HpccAckFeeder -> HpccEngine) across PSN wraps.

Every QP starts at its own first PSN (``clear_seq``): 0, just below the first and second 24-bit wrap, at the last
PSN before a wrap, far out in the 64-bit sequence space.  Rounds of ``sent`` pulses (grouped per QP, so one QP's
pulses come on consecutive clocks, or shuffled, with random idle clocks) alternate with RC ACKs built by sw.roce
with the QP's forward-path INT hops echoed in (``int_ack_stim``), whose 24-bit PSNs wrap while packets are
outstanding; now and then a QP starts again below another wrap, or its hops' timestamps jump hours ahead (a
tx-term divisor beyond its dividend).  The same frames go through the host stack's receive path into one
``sw.cc.Hpcc`` per QP, with the true (unwrapped) acknowledged and sent sequences; every engine update (trace
record of kind UPDATE, the 64-bit ``last_update_seq`` included) and every rate write must equal the model's, in
order, per QP.
"""

from __future__ import annotations

import dataclasses
import logging
import random

import cocotb
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiStreamFrame
from hwsim import CLK_NS, BlockTestbench, tb_record
from int_ack_stim import IntPath, ack_frame, host_hops

from hw.hpcc import KIND_UPDATE, QP_STATE
from hw.int_ack import MAX_INT_HOPS, PSN_BITS
from sw.cc import AckInfo, Hpcc, HpccParams, RateToIncrement
from sw.roce.softnic.qp_pacer import QpPacer

PSN_MOD = 1 << PSN_BITS
STATE_FIELDS = ("window_bytes", "wc_bytes", "u_q16", "inc_stage", "rate_kbps", "last_update_seq")


def near_wrap(rng: random.Random) -> int:
    """A first PSN (unwrapped) a few packets below one of the 24-bit PSN's wraps."""
    return rng.randrange(1, 1 << 20) * PSN_MOD - rng.randrange(1, 40)


def first_psns(rng: random.Random, n_qps: int) -> list[int]:
    """Each QP's first PSN, unwrapped: a few fixed corner cases, then random ones just below a wrap."""
    fixed = [0, PSN_MOD - 30, 2 * PSN_MOD - 7, PSN_MOD - 1, (1 << 40) - 20]
    return (fixed + [near_wrap(rng) for _ in range(n_qps)])[:n_qps]


def decode_state(raw: int) -> tuple[int, ...]:
    """The fields of a ``QP_STATE`` trace record that ``sw.cc.hpcc.HpccState`` has, in its order."""
    return tuple((raw >> QP_STATE[name].offset) & ((1 << QP_STATE[name].width) - 1) for name in STATE_FIELDS)


class TB(BlockTestbench):
    """Clock, reset, the RX stream source, QP init/clear and sent pulses; a per-clock monitor of rate writes and
    engine trace records."""

    settle_clocks = 4

    def __init__(self, dut) -> None:
        super().__init__(dut)
        self.qp_bits = self.p["qp_bits"]
        self.src = self.axis_source()
        self.src.log.setLevel(logging.WARNING)
        for sig in (dut.sent, dut.sent_qp, dut.clear, dut.clear_qp, dut.clear_seq, dut.init__valid,
                    dut.init__payload):
            sig.value = 0
        dut.rate_wr__ready.value = 1
        self.rate_writes: list[tuple[int, int]] = []
        self.updates: list[tuple[int, tuple[int, ...]]] = []

    async def monitor(self) -> None:
        dut, mask = self.dut, (1 << self.qp_bits) - 1
        last_seq = 0
        while True:
            await RisingEdge(dut.clk)
            valid = dut.rate_wr__valid.value
            if valid.is_resolvable and int(valid):
                raw = int(dut.rate_wr__payload.value)
                self.rate_writes.append((raw & mask, raw >> self.qp_bits))
            seq = dut.trace_seq.value
            if seq.is_resolvable and int(seq) != last_seq:
                last_seq = int(seq)
                if int(dut.trace_kind.value) == KIND_UPDATE:
                    self.updates.append((int(dut.trace_qp.value), decode_state(int(dut.trace_state.value))))

    async def init_qp(self, qp: int, first_psn: int) -> None:
        """A QP init: the feeder's count to ``first_psn`` (once ``clear_ok``), the engine's state to W_max."""
        dut = self.dut
        dut.clear_qp.value, dut.clear_seq.value, dut.clear.value = qp, first_psn, 1
        while True:
            await RisingEdge(dut.clk)
            if int(dut.clear_ok.value):
                break
        dut.clear.value = 0
        dut.init__payload.value, dut.init__valid.value = qp, 1
        while True:
            await RisingEdge(dut.clk)
            if int(dut.init__ready.value):
                break
        dut.init__valid.value = 0

    async def pulses(self, qps: list[int | None]) -> None:
        """One ``sent`` pulse per clock for each QP in ``qps`` (None: an idle clock)."""
        dut = self.dut
        for qp in qps:
            dut.sent.value = int(qp is not None)
            dut.sent_qp.value = qp or 0
            await RisingEdge(dut.clk)
        dut.sent.value = 0
        await ClockCycles(dut.clk, 4)


@cocotb.test()
async def test_acks_across_psn_wraps_update_like_sw_cc_hpcc(dut):
    tb = TB(dut)
    p = tb.p
    params = HpccParams(**p["hpcc"])
    unit, n_qps = p["qlen_unit_bytes"], p["n_qps"]
    dut.qlen_unit_bytes.value, dut.link_kbps.value = unit, params.line_rate_kbps
    conv = RateToIncrement(clk_hz=round(1e9 / CLK_NS))
    rng = random.Random(p["seed"])
    await tb.reset()
    cocotb.start_soon(tb.monitor())

    first = first_psns(rng, n_qps)
    hpcc = {qp: Hpcc(params) for qp in range(n_qps)}   # each QP's model, behind its pacer in models
    models = {qp: QpPacer(hpcc[qp], 0) for qp in range(n_qps)}
    want_rates: dict[int, list[int]] = {qp: [] for qp in range(n_qps)}
    want_updates: dict[int, list[tuple[int, ...]]] = {qp: [] for qp in range(n_qps)}
    for qp in range(n_qps):
        await tb.init_qp(qp, first[qp])
        want_rates[qp].append(conv.increment(params.line_rate_kbps))
    paths = {qp: IntPath(rng, rng.randint(1, MAX_INT_HOPS), params.line_rate_kbps, unit, params.w_max_bytes)
             for qp in range(n_qps)}
    sent, acked = dict(enumerate(first)), dict(enumerate(first))   # next PSN to send / to be acked, unwrapped
    # a jump to just past the engine's tx-term dividend range: link x dts a little above 2^dividend_bits
    edge_us = -(-(1 << p["tx_dividend_bits"]) // (1000 * params.line_rate_kbps))
    echoes = wrap_acks = inits = jumps = 0
    for _ in range(p["rounds"]):
        if rng.random() < 0.3:   # a QP starts again just below another wrap (a new connection on the QP)
            qp = rng.randrange(n_qps)
            first[qp] = sent[qp] = acked[qp] = near_wrap(rng)
            hpcc[qp] = Hpcc(params)
            models[qp] = QpPacer(hpcc[qp], 0)
            await tb.init_qp(qp, first[qp])
            want_rates[qp].append(conv.increment(params.line_rate_kbps))
            inits += 1
        order: list[int | None] = []
        for qp in range(n_qps):
            n = rng.randint(0, 12)
            order += [qp] * n
            sent[qp] += n
        if rng.random() < 0.5:
            rng.shuffle(order)
        for _ in range(rng.randint(0, 6)):
            order.insert(rng.randrange(len(order) + 1), None)
        await tb.pulses(order)
        for _ in range(rng.randint(1, 4)):
            qp = rng.choice([q for q in range(n_qps) if sent[q] > first[q]])
            acked[qp] = rng.randint(max(acked[qp], first[qp] + 1), sent[qp])
            psn = (acked[qp] - 1) % PSN_MOD
            roll = rng.random()
            if roll < 0.05:
                frame = ack_frame(qp, psn, None)
            else:
                if roll > 0.97:
                    paths[qp] = IntPath(rng, rng.randint(1, MAX_INT_HOPS), params.line_rate_kbps, unit,
                                        params.w_max_bytes)
                elif roll < 0.12:   # the hops' clocks jump hours ahead: link x dts beyond the tx term's dividend
                    jump_us = rng.choice((edge_us, rng.randrange(1 << 34, 1 << 42)))
                    paths[qp].ts_us = [t + jump_us for t in paths[qp].ts_us]
                    jumps += 1
                frame = ack_frame(qp, psn, paths[qp].next_records())
            pkt, hops = host_hops(frame, models[qp], unit)
            assert (pkt.dest_qp & ((1 << tb.qp_bits) - 1), pkt.psn) == (qp, psn)
            model = hpcc[qp]
            before = model.updates
            model.on_ack(AckInfo(acked[qp], sent[qp], hops), 0)
            if hops:
                echoes += 1
                wrap_acks += (acked[qp] - 1) // PSN_MOD != (sent[qp] - 1) // PSN_MOD
            if model.updates != before:
                want_rates[qp].append(conv.increment(model.rate_kbps))
                want_updates[qp].append(dataclasses.astuple(model.state()))
            await tb.src.send(AxiStreamFrame(frame))
            await tb.src.wait()
            await ClockCycles(dut.clk, p["ack_clocks"])
    await ClockCycles(dut.clk, p["ack_clocks"])

    got_rates = {qp: [r for q, r in tb.rate_writes if q == qp] for qp in range(n_qps)}
    got_updates = {qp: [st for q, st in tb.updates if q == qp] for qp in range(n_qps)}
    mismatches = sum(sum(a != b for a, b in zip(got[qp], want[qp], strict=False)) + abs(len(got[qp]) - len(want[qp]))
                     for got, want in ((got_rates, want_rates), (got_updates, want_updates)) for qp in range(n_qps))
    tb_record(echo_acks=echoes, wrap_acks=wrap_acks, reinits=inits, ts_jumps=jumps,
              updates=sum(len(v) for v in want_updates.values()),
              mismatches=mismatches, int_acks=int(dut.int_acks.value), dropped=int(dut.dropped.value))
    for qp in range(n_qps):
        assert got_updates[qp] == want_updates[qp], f"QP {qp} (first PSN {first[qp]:#x}): updates " \
            f"{got_updates[qp][:4]} != sw.cc.Hpcc {want_updates[qp][:4]}"
        assert got_rates[qp] == want_rates[qp], f"QP {qp}: rate writes {got_rates[qp][:8]} != {want_rates[qp][:8]}"
    assert (int(dut.int_acks.value), int(dut.dropped.value)) == (echoes, 0)
