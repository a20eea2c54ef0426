"""cocotb scoreboard of hw.hpcc.HpccEngine against the golden model sw.cc.Hpcc, with HPCC-state coverage.

Every QP follows its own path of 1..max_hops INT hops (links of different rates, load regimes from 1/4 to
2.5x the link, standing queues under overload, counters that wrap, stale and link-rate-less records, ACKs
without INT, hop-count changes).  ACKs of random QPs are offered back to back; every trace record the DUT
emits is replayed into one ``Hpcc`` per QP and the registers compared; every rate write is checked against
``RateToIncrement`` of the model's rate and the model's window.  The clocks each ACK took are recorded
(rate writes always ready in the first half, randomly back-pressured in the second).
"""

from __future__ import annotations

import random
import time
from collections import Counter, deque

import cocotb
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge, ValueChange
from cocotb.utils import get_sim_time
from cocotb_coverage.coverage import CoverCross, CoverPoint, coverage_db
from hwsim import CLK_NS, BlockTestbench, tb_params, tb_record

from hw.hpcc import KIND_INIT, KIND_NO_INT, KIND_NO_SAMPLE, KIND_RECORD, KIND_UPDATE, QP_STATE, HpccEngine
from sw.cc import AckInfo, Hpcc, HpccParams, IntHop, RateToIncrement
from sw.cc.hpcc import hop_utilization_q16

FIELDS = [(name, field.offset, field.width) for name, field in QP_STATE]
KINDS = [KIND_INIT, KIND_NO_INT, KIND_RECORD, KIND_NO_SAMPLE, KIND_UPDATE]
LINKS_KBPS = (100_000_000, 40_000_000, 25_000_000)


def decode_state(raw: int) -> dict[str, int]:
    return {name: (raw >> off) & ((1 << width) - 1) for name, off, width in FIELDS}


def window_bin(w: int, p: HpccParams) -> str:
    return "min" if w == p.w_min_bytes else "max" if w == p.w_max_bytes else "inside"


def make_coverage(p: HpccParams, max_hops: int):
    """The sampling function with its cover points (bins depend on max_stage and max_hops)."""
    upd = KIND_UPDATE

    @CoverPoint("hpcc.kind", xf=lambda kind, st, hop, mult, wcu: kind, bins=KINDS)
    @CoverPoint("hpcc.inc_stage", xf=lambda kind, st, hop, mult, wcu: st["inc_stage"] if kind == upd else None,
                bins=list(range(p.max_stage + 1)))
    @CoverPoint("hpcc.branch", xf=lambda kind, st, hop, mult, wcu: (mult and "mult" or "add") if kind == upd else None,
                bins=["mult", "add"])
    @CoverPoint("hpcc.wc_update", xf=lambda kind, st, hop, mult, wcu: bool(wcu) if kind == upd else None,
                bins=[True, False])
    @CoverPoint("hpcc.max_hop", xf=lambda kind, st, hop, mult, wcu: hop if kind == upd else None,
                bins=list(range(max_hops)))
    @CoverPoint("hpcc.window", xf=lambda kind, st, hop, mult, wcu: window_bin(st["window_bytes"], p)
                if kind == upd else None, bins=["min", "inside", "max"])
    @CoverCross("hpcc.branch_x_wc_update", items=["hpcc.branch", "hpcc.wc_update"])
    def sample(kind: int, st: dict[str, int], hop: int, mult: int, wcu: int) -> None:
        """One coverage sample per trace record."""

    return sample


class PathStim:
    """One QP's INT path and sender: a seeded source of ACKs (the stimulus, not a model)."""

    def __init__(self, rng: random.Random, p: HpccParams, max_hops: int) -> None:
        self.rng, self.p, self.max_hops = rng, p, max_hops
        self.seq = 0
        self.level_64, self.left, self.burst_hop = 64, 0, -1
        self.new_path(rng.randint(1, max_hops))

    def new_path(self, n_hops: int) -> None:
        rng, ts_mod, tx_mod = self.rng, 1 << self.p.int_ts_bits, 1 << self.p.int_tx_bits
        self.ts = [(ts_mod - rng.randrange(1, 4 * self.p.base_rtt_ns)) % ts_mod for _ in range(n_hops)]
        self.tx = [(tx_mod - rng.randrange(0, 1 << 20)) % tx_mod for _ in range(n_hops)]
        self.links = [rng.choice(LINKS_KBPS) for _ in range(n_hops)]
        self.burst_hop = -1

    def next_ack(self) -> AckInfo:
        rng, p = self.rng, self.p
        bdp = p.w_max_bytes
        self.seq += rng.randrange(0, 4 * 4096)
        snd_nxt = self.seq + rng.randrange(0, bdp + 1)
        if rng.random() < 0.04:
            return AckInfo(self.seq, snd_nxt)
        if rng.random() < 0.01:
            self.new_path(rng.randint(1, self.max_hops))
        if self.left == 0:
            self.level_64, self.left = rng.choice((16, 32, 48, 56, 60, 64, 72, 96, 128, 160)), rng.randrange(10, 60)
            # now and then an incast: one hop holds a huge standing queue for the whole regime (U saturates)
            self.burst_hop = rng.randrange(len(self.links)) if rng.random() < 0.08 else -1
        self.left -= 1
        gap = 0 if rng.random() < 0.03 else rng.randrange(1, p.base_rtt_ns + p.base_rtt_ns // 2)
        hops = []
        for h, link in enumerate(self.links):
            load_64 = self.level_64 * rng.randrange(40, 65) // 64
            dts = max(0, gap + rng.randrange(-gap // 8 - 1, gap // 8 + 1)) if gap else 0
            if rng.random() < 0.02:
                dts = -rng.randrange(1, 1000)                       # a stale record: time went backwards
            self.ts[h] = (self.ts[h] + dts) % (1 << p.int_ts_bits)
            self.tx[h] = (self.tx[h] + link * max(dts, 0) * load_64 // (64 * 8_000_000)) % (1 << p.int_tx_bits)
            qlen = rng.randrange(0, 2 * bdp) if load_64 > 64 else rng.randrange(0, 2000)
            if h == self.burst_hop:
                qlen = rng.randrange(1 << 28, 1 << 32)
            hops.append(IntHop(self.ts[h], self.tx[h], qlen, 0 if rng.random() < 0.005 else link))
        return AckInfo(self.seq, snd_nxt, tuple(hops))


class TB(BlockTestbench):
    settle_clocks = 1

    def __init__(self, dut) -> None:
        super().__init__(dut)
        tp = tb_params()
        self.n_qps, self.max_hops = tp["n_qps"], tp["max_hops"]
        self.params = HpccParams(**tp["hpcc"])
        self.engine = HpccEngine(n_qps=self.n_qps, max_hops=self.max_hops, params=self.params,
                                 steps=tp["steps"])              # only for its packing and II figures
        self.conv = RateToIncrement(clk_hz=tp["clk_hz"])
        self.sample = make_coverage(self.params, self.max_hops)
        self.models: dict[int, Hpcc] = {}
        self.prev_hops: dict[int, tuple[IntHop, ...]] = {}
        self.sent: deque[tuple[int, int, AckInfo | None]] = deque()
        self.expect_rate: dict[int, tuple[int, int]] = {}
        self.kinds: Counter[int] = Counter()
        self.acks = self.updates = self.rates_checked = 0
        self.ii: dict[int, list[int]] = {}
        self.ii_over: list[str] = []
        self.errors: list[str] = []
        self.prev_hops_ii: dict[int, tuple[IntHop, ...]] = {}
        self.backpressure = False
        dut.init__valid.value = 0
        dut.ack__valid.value = 0
        dut.rate_wr__ready.value = 1

    async def push_init(self, qp: int) -> None:
        self.dut.init__payload.value = qp
        self.dut.init__valid.value = 1
        while True:
            await RisingEdge(self.dut.clk)
            if self.dut.init__ready.value:
                break
        self.dut.init__valid.value = 0

    async def push_ack(self, payload: int) -> int:
        """Offer one ACK and hold it until taken (``ready`` is high for exactly that clock); returns the clocks
        it was offered, i.e. the initiation interval when ACKs come back to back."""
        dut = self.dut
        dut.ack__payload.value = payload
        dut.ack__valid.value = 1
        t0 = get_sim_time("ps")
        await RisingEdge(dut.ack__ready)
        await RisingEdge(dut.clk)
        dut.ack__valid.value = 0
        return round((get_sim_time("ps") - t0) / (CLK_NS * 1000))

    def expected_argmax(self, qp: int, ack: AckInfo) -> int | None:
        """The hop whose sample the model keeps (first of the largest), from the previous hops of this QP."""
        prev = self.prev_hops.get(qp)
        if ack.hops:
            self.prev_hops[qp] = ack.hops
        if prev is None or len(prev) != len(ack.hops) or not ack.hops:
            return None
        best, arg = -1, None
        p = self.params
        for i, (new, old) in enumerate(zip(ack.hops, prev, strict=True)):
            s = hop_utilization_q16(new, old, p.base_rtt_ns, p.int_ts_bits, p.int_tx_bits)
            if s is not None and s[0] > best:
                best, arg = s[0], i
        return arg

    async def watch_trace(self) -> None:
        """Replay every trace record into the model of its QP and compare all registers."""
        dut = self.dut
        while True:
            await ValueChange(dut.trace_seq)
            await ReadOnly()
            kind, qp, hop = int(dut.trace_kind.value), int(dut.trace_qp.value), int(dut.trace_hop.value)
            mult, wcu = int(dut.trace_mult.value), int(dut.trace_wc_update.value)
            rtl = decode_state(int(dut.trace_state.value))
            sent_kind, sent_qp, ack = self.sent.popleft()
            where = f"event {sum(self.kinds.values())} QP {qp} kind {kind}"
            if sent_qp != qp or (sent_kind == KIND_INIT) != (kind == KIND_INIT):
                self.errors.append(f"{where}: order, sent {(sent_kind, sent_qp)}")
                continue
            if kind == KIND_INIT:
                self.models[qp] = Hpcc(self.params)
                self.prev_hops.pop(qp, None)
            else:
                model = self.models[qp]
                before = model.updates
                arg = self.expected_argmax(qp, ack)
                model.on_ack(ack, 0)
                self.acks += 1
                if (kind == KIND_UPDATE) != (model.updates > before):
                    self.errors.append(f"{where}: model updated {model.updates > before}")
                if kind == KIND_UPDATE:
                    self.updates += 1
                    if hop != arg:
                        self.errors.append(f"{where}: most loaded hop {hop} != model {arg}")
            want = self.models[qp].state()
            got = {k: v for k, v in rtl.items() if k != "n_hops"}
            exp = {k: int(getattr(want, k)) for k in got}
            if got != exp:
                diff = {k: (got[k], exp[k]) for k in got if got[k] != exp[k]}
                self.errors.append(f"{where}: (rtl, model) {diff}")
            if kind in (KIND_UPDATE, KIND_INIT):
                self.expect_rate[qp] = (self.conv.increment(want.rate_kbps), want.window_bytes)
            self.kinds[kind] += 1
            self.sample(kind, rtl, hop, mult, wcu)

    async def rate_sink(self, rng: random.Random) -> None:
        """Accept rate writes (randomly back-pressured when asked) and check each against the model one clock
        later (the trace record of the same event is replayed at the same instant)."""
        dut = self.dut
        qp_bits = (self.n_qps - 1).bit_length()
        while True:
            valid = dut.rate_wr__valid.value
            if not (valid.is_resolvable and int(valid)):
                await RisingEdge(dut.rate_wr__valid)
            taken = None
            while taken is None:
                dut.rate_wr__ready.value = int(not self.backpressure or rng.random() < 0.3)
                await ReadOnly()
                if not int(dut.rate_wr__valid.value):
                    break
                if int(dut.rate_wr__ready.value):
                    raw = int(dut.rate_wr__payload.value)
                    taken = (raw & ((1 << qp_bits) - 1), raw >> qp_bits, int(dut.window_bytes.value))
                await RisingEdge(dut.clk)
            if taken is None:
                continue
            qp, rate, window = taken
            if (rate, window) != self.expect_rate.get(qp):
                self.errors.append(f"rate_wr QP {qp}: (increment, window) {(rate, window)} != "
                                   f"{self.expect_rate.get(qp)}")
            self.rates_checked += 1
            dut.rate_wr__ready.value = 1

    def kind_of(self, qp: int, ack: AckInfo) -> tuple[int, int]:
        """(kind, sampled hops) the model will see, for the II bound (from the TB's own hop history)."""
        prev = self.prev_hops_ii.get(qp)
        if not ack.hops:
            return KIND_NO_INT, 0
        self.prev_hops_ii[qp] = ack.hops
        if prev is None or len(prev) != len(ack.hops):
            return KIND_RECORD, 0
        p = self.params
        n = sum(hop_utilization_q16(a, b, p.base_rtt_ns, p.int_ts_bits, p.int_tx_bits) is not None
                for a, b in zip(ack.hops, prev, strict=True))
        return (KIND_UPDATE if n else KIND_NO_SAMPLE), n


@cocotb.test()
async def test_hpcc_scoreboard(dut):
    """Random multi-hop INT ACK streams on every QP: RTL registers and rate writes equal the golden model."""
    tb = TB(dut)
    tp = tb_params()
    await tb.reset()
    cocotb.start_soon(tb.watch_trace())
    rng = random.Random(tp.get("seed", 1))
    cocotb.start_soon(tb.rate_sink(random.Random(rng.random())))
    for qp in range(tb.n_qps):
        tb.sent.append((KIND_INIT, qp, None))
        await tb.push_init(qp)
    paths = [PathStim(random.Random(rng.random()), tb.params, tb.max_hops) for _ in range(tb.n_qps)]
    n_acks = tp["acks"]
    wall0, t0 = time.perf_counter(), get_sim_time("ns")
    for i in range(n_acks):
        tb.backpressure = i >= n_acks // 2
        qp = rng.randrange(tb.n_qps)
        ack = paths[qp].next_ack()
        kind, sampled = tb.kind_of(qp, ack)
        tb.sent.append((kind, qp, ack))
        clocks = await tb.push_ack(tb.engine.ack_bits(qp, ack))
        if not tb.backpressure and i:                     # the first ACK waits for the last init's rate write
            tb.ii.setdefault(kind, []).append(clocks)
            bound = tb.engine.ack_ii_clocks(len(ack.hops), sampled, kind)
            if clocks > bound:
                tb.ii_over.append(f"ACK {i} kind {kind} {len(ack.hops)} hops: {clocks} > {bound} clocks")
    await ClockCycles(dut.clk, 400)
    sim_clk = (get_sim_time("ns") - t0) / CLK_NS
    names = ["hpcc.kind", "hpcc.inc_stage", "hpcc.branch", "hpcc.wc_update", "hpcc.max_hop", "hpcc.window",
             "hpcc.branch_x_wc_update"]
    cov = {name: coverage_db[name].coverage * 100 // coverage_db[name].size for name in names}
    ii = {str(k): {"n": len(v), "mean": round(sum(v) / len(v), 1), "max": max(v)} for k, v in sorted(tb.ii.items())}
    tb_record(acks=tb.acks, updates=tb.updates, rates_checked=tb.rates_checked, kinds=dict(tb.kinds),
              coverage_pct=cov, ii_clocks=ii, ii_bound_3hops=tb.engine.ack_ii_clocks(3), sim_clocks=sim_clk,
              clocks_per_s=sim_clk / (time.perf_counter() - wall0), mismatches=len(tb.errors))
    assert not tb.errors, f"{len(tb.errors)} mismatches, first: {tb.errors[:3]}"
    assert not tb.ii_over, f"II above the documented bound: {tb.ii_over[:3]}"
    assert not tb.sent, f"{len(tb.sent)} events never traced"
    assert tb.acks == n_acks and tb.updates > n_acks // 3, f"{tb.acks} ACKs, {tb.updates} updates"
    assert tb.rates_checked == tb.updates + tb.n_qps, f"{tb.rates_checked} rate writes"
    if not tp.get("require_coverage", True):
        return
    missing = {k: v for k, v in cov.items() if v < 100}
    assert not missing, f"functional coverage below 100 %: {missing}"
