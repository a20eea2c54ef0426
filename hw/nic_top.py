# amaranth: UnusedElaboratable=no
"""NIC congestion-control top level: RX parsers -> CNP generator / DCQCN RP or HPCC engine -> TX scheduler, CSR bus.

Data flow (``NicCcTop``, Verilog module ``nic_cc_top``):

* RX: ``rx_s_axis`` -> ``icrc_check`` -> ``int_ack`` -> ``roce_parser`` -> ``rx_m_axis`` (frames pass unchanged).
  The parser's CE or CNP event of a frame waits (in one of ``EVENT_SLOTS`` slots, by frame number) for the frame's
  ICRC verdict, ``icrc_check.latency`` clocks after its last beat: a RoCEv2 frame with a wrong ICRC raises no event
  and counts in RX_ICRC_ERRORS.  Frames carrying INT (DSCP_INT) are not judged: their ICRC covers the frame
  without the INT stack (``sw.roce.wire.int_md``).  A CE-marked RoCE
  packet's QP goes to ``cnp_gen`` (notification point), which puts at most one request per QP per CNP_INTERVAL_NS on
  ``cnp_req`` (the QP a CNP must be sent for).  A received CNP's QP goes through a small FIFO to ``dcqcn_rp``.
  A RoCE ACK carrying echoed INT hops (``hw.int_ack``: the wire format of ``sw.roce.wire.int_md`` and fabric.p4)
  goes through a small FIFO to ``hpcc_feed``, which converts its hops to HPCC units (timestamps in us,
  occupancy x HPCC_QLEN_UNIT_BYTES, every hop at HPCC_LINE_RATE_KBPS) and pairs its PSN with the QP's count
  of sent frames (``snd_nxt``, in packets), then to ``hpcc`` (``hw.hpcc.HpccEngine``, 4 hops).
* CC: ``dcqcn_rp`` turns CNPs, its timers and the bytes each sent packet carries into per-QP rates, ``hpcc``
  turns INT-echo ACKs into per-QP windows and rates; the rate writes of the mode's engine and the CSR's
  QP_RATE writes (the CSR first) go to ``tx_sched``; a mirror memory keeps the last rate of every QP so
  QP_RATE reads back the QP's current rate.
* TX: doorbells (``doorbell``: qp, bytes) queue work; ``tx_sched`` paces every QP and cuts it into MTU-sized
  payloads; each payload that leaves the scheduler is counted against its QP's byte counter.  From 512 bits
  (``hw.tx_frame.MIN_DATA_WIDTH``) the payloads go through a register slice to ``tx_frame`` (the scheduler's
  handshake starts at flip-flops) and ``tx_m_axis`` carries complete RoCEv2 frames (``tuser`` = QP): the QP's
  54-byte header template (Ethernet/IPv4/UDP/BTH, staged in the TMPL words and handed over by TMPL_WR, see
  ``hw.csr``; the template's BTH PSN is the QP's next PSN), IP/UDP lengths, IPv4 checksum, the QP's PSN (+1 per
  frame, wrapping at 2^24) and the ICRC.  The payload is ``tx_frame``'s per-QP pattern (byte i of PSN p of QP q
  = ((p + i) mod 256) xor (q mod 256), ``sw.roce.wire.pattern``): a NIC whose host side is a register bus has no
  payload memory to read, and a pattern lets the receiver check every byte, offset and PSN.  Doorbell sizes and
  the MTU must be multiples of 4 (the pad count is the template's).  The opcode is the template's: SEND ONLY
  (0x04) is the one that fits the RTL's unreliable streams: every frame is a whole message without RETH (the
  template is 54 bytes), so a lost frame loses only itself (no retransmission engine here: the peer counts PSN
  gaps instead of NAKing, and ACKs, e.g. carrying INT echoes, only when the template sets AckReq); WRITE FIRST/
  MIDDLE/LAST would lose whole messages with one frame, WRITE ONLY needs a RETH per frame.  For HPCC, start
  the template's PSN at 0 with QP_INIT (the INT-echo feeder numbers the QP's frames from 0 at QP_INIT).  Below
  512 bits (a build for fast CC simulations) there is no framer: ``tx_m_axis`` carries the scheduler's
  payload-sized beats as they are and the TMPL words are unmapped.  With the framer the limiter charges each frame's
  wire bytes, payload + ``TX_WIRE_OVERHEAD_BYTES`` (82: headers, ICRC, Ethernet preamble/FCS/gap), as the software
  NIC's pacer does, so QP_RATE and the engines' rates are wire rates; without it, payload rates.
* CC_MODE (none 0, dcqcn 1, hpcc 2; 3 is rejected with ERR_VALUE).  Outside dcqcn, CE packets raise no CNP
  requests, received CNPs are counted and dropped and the reaction point's rate writes are discarded (its
  timers keep running on its stored state); outside hpcc, INT-echo ACKs are counted and dropped and the HPCC
  engine gets no QP_INIT.  In none, rates are whatever the CSR wrote.
* Mode switching resets nothing by itself: each engine keeps every QP's state in its BRAM, and the rates in the
  limiter stay until the new mode's engine writes.  After switching, write QP_INIT for each QP: it goes to the
  engine of the current mode only (dcqcn: rate = line rate, alpha = ALPHA_INIT, timers restarted; hpcc:
  W = Wc = W_max, rate = HPCC_LINE_RATE_KBPS, U = 0, stage 0, stored hops forgotten so the first INT-echo ACK
  only records them) and, in every mode, zeroes the QP's sent-frame count (its PSNs start at 0 again).
* QP_INIT (0x40) starts QP_SEL's CC state afresh as above (and writes its first rate to the limiter); an engine
  leaves a QP idle until its first QP_INIT.  DCQCN parameters apply from each QP's next event on (timer
  deadlines already set keep their time); HPCC parameters from the ACKs and inits that start after the
  engine's window products (W_max, W_min, W_AI = rate x T / 8e6) followed them, at most
  ``HpccEngine.cfg_settle_clocks`` (114 at 2 quotient bits per clock) after the write.

Registers (word addresses, counters and parameters defined once in ``sw.cc.nic_regs``; see ``hw.csr`` for
ID/QP_SEL/QP_RATE/ERR/QP_INIT and the error bits).  Counters are
32-bit, read-only, wrapping:

{counters}

Parameters (read/write; reset and range at the default build, 1024 bits, 1024 QPs, 400 MHz, MTU 4096: the
line rate is 409600000 kb/s, the timer minimum the reaction point's sweep interval, the byte counter > MTU):

{params}
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hw.cnp import CnpGenerator
from hw.csr import ADDR_BITS, REG_PARAM0, CsrBank
from hw.dcqcn import DCQCN_CFG, DcqcnRpEngine, sweep_interval_ns
from hw.errors import HwParamError
from hw.hpcc import HPCC_CFG, KIND_UPDATE, HpccEngine
from hw.icrc import IcrcChecker
from hw.int_ack import MAX_INT_HOPS, HpccAckFeeder, IntAckParser
from hw.lib.stream import AxiStream, SkidBuffer
from hw.parser import HDR_BYTES, RoceParser
from hw.sched import PENDING_BITS, RATE_FRAC_BITS, TxScheduler
from hw.tx_frame import MIN_DATA_WIDTH, TxFrameBuilder
from sw.cc import DcqcnParams, RateToIncrement
from sw.cc.nic_regs import CC_MODE_DCQCN as CC_MODE_DCQCN
from sw.cc.nic_regs import CC_MODE_HPCC as CC_MODE_HPCC
from sw.cc.nic_regs import CC_MODE_NONE as CC_MODE_NONE
from sw.cc.nic_regs import COUNTER_ADDR, COUNTERS, TEMPLATE_BYTES, U32, ParamReg, line_rate_kbps, nic_params
from sw.cc.nic_regs import TX_WIRE_OVERHEAD_BYTES as TX_WIRE_OVERHEAD_BYTES
from sw.cc.nic_regs import hpcc_max_rtt_ns as hpcc_max_rtt_ns
from sw.cc.nic_regs import hpcc_reset as hpcc_reset

if TEMPLATE_BYTES != HDR_BYTES:
    raise HwParamError(f"sw.cc.nic_regs.TEMPLATE_BYTES {TEMPLATE_BYTES} != the framer's header {HDR_BYTES} bytes")
EVENT_SLOT_BITS = 4
EVENT_SLOTS = 1 << EVENT_SLOT_BITS  # frames whose event may wait for an ICRC verdict (> icrc latency + 5)
HPCC_ENGINE_STEPS = 2  # quotient bits per clock of the HPCC engine's dividers


def min_timer_ns(n_qps: int, clk_period_ps: int) -> int:
    """Shortest DCQCN timer period the reaction point's sweep serves exactly (``DcqcnRpEngine``'s limit)."""
    return int(sweep_interval_ns(n_qps, clk_period_ps)) + 1


def _bound_text(b: int | str) -> str:
    return b if isinstance(b, str) else "2^32-1" if b == U32 else str(b)


def register_table(params: tuple[ParamReg, ...]) -> tuple[list[str], list[str]]:
    """(counter lines, parameter lines) of the register map, as the module docstring shows them."""
    counters = [f"  {addr:#04x} {name:<18} {doc}" for (name, doc), addr in
                zip(COUNTERS, COUNTER_ADDR.values(), strict=True)]
    rows = [f"  {REG_PARAM0 + i:#04x} {p.name:<20} u{p.width:<2} {p.reset:>9}  "
            f"{_bound_text(p.lo) + '..' + _bound_text(p.hi):<31} {p.policy:<6} {p.doc}"
            for i, p in enumerate(params)]
    rows.insert(0, f"  addr {'name':<20} {'w':<3} {'reset':>9}  {'range':<31} {'bad':<6} meaning")
    return counters, rows


DEFAULT_PARAMS = nic_params(line_kbps=line_rate_kbps(1024, 2500), timer_min_ns=min_timer_ns(1024, 2500),
                            mtu_bytes=4096)
_counter_lines, _param_lines = register_table(DEFAULT_PARAMS)
__doc__ = __doc__.format(counters="\n".join(_counter_lines), params="\n".join(_param_lines))


class NicCcTop(wiring.Component):
    """The NIC's congestion-control data path: parsers, CNP generator, DCQCN reaction point, HPCC engine,
    scheduler, CSR bank."""

    def __init__(self, *, data_width: int = 1024, n_qps: int = 1024, mtu_bytes: int = 4096,
                 burst_bytes: int = 16384, clk_period_ps: int = 2500, event_fifo_depth: int = 16) -> None:
        if not 1 <= mtu_bytes <= 0xFFFF:
            raise HwParamError(f"mtu_bytes must be in 1..65535 (the reaction point counts 16-bit sizes), "
                               f"not {mtu_bytes}")
        if event_fifo_depth < 2:
            raise HwParamError(f"event_fifo_depth must be >= 2, not {event_fifo_depth}")
        self.data_width = data_width
        self.n_qps = n_qps
        self.qp_bits = (n_qps - 1).bit_length()
        self.clk_period_ps = clk_period_ps
        self.line_kbps = line_rate_kbps(data_width, clk_period_ps)
        self.timer_min_ns = min_timer_ns(n_qps, clk_period_ps)
        self.params = nic_params(line_kbps=self.line_kbps, timer_min_ns=self.timer_min_ns, mtu_bytes=mtu_bytes)
        resets = {p.name: p.reset for p in self.params if p.name in DCQCN_CFG.members}
        resets["clamp_target_rate"] = bool(resets["clamp_target_rate"])
        self.dcqcn_reset = DcqcnParams(**resets, cnp_interval_ns=50_000)
        self.rate_conv = RateToIncrement(clk_hz=round(1e12 / clk_period_ps), frac_bits=RATE_FRAC_BITS)
        self.hpcc_reset = hpcc_reset(self.line_kbps)
        self.event_fifo_depth = event_fifo_depth
        self.framer = data_width >= MIN_DATA_WIDTH
        """tx_m_axis carries RoCEv2 frames from ``tx_frame`` (else the scheduler's beats; module docstring)."""
        # with the framer the limiter charges each frame's wire bytes (a wire rate, as the software NIC's pacer)
        self.sched = TxScheduler(data_width=data_width, n_qps=n_qps, mtu_bytes=mtu_bytes, burst_bytes=burst_bytes,
                                 frame_overhead_bytes=TX_WIRE_OVERHEAD_BYTES if self.framer else 0)
        self.parser = RoceParser(data_width=data_width, n_qps=n_qps)
        self.icrc = IcrcChecker(data_width=data_width)
        if self.icrc.latency + 3 >= EVENT_SLOTS:
            raise HwParamError(f"data_width {data_width}: ICRC latency {self.icrc.latency} needs more than "
                               f"{EVENT_SLOTS} event slots")
        self.np = CnpGenerator(n_qps=n_qps, clk_period_ps=clk_period_ps, runtime_cfg=True)
        self.rp = DcqcnRpEngine(n_qps=n_qps, params=self.dcqcn_reset, clk_period_ps=clk_period_ps,
                                rate_conv=self.rate_conv, mtu_bytes=mtu_bytes, runtime_cfg=True)
        self.int_ack = IntAckParser(data_width=data_width, n_qps=n_qps)
        self.hpcc_feed = HpccAckFeeder(n_qps=n_qps, max_hops=MAX_INT_HOPS)
        self.hpcc = HpccEngine(n_qps=n_qps, max_hops=MAX_INT_HOPS, params=self.hpcc_reset, rate_conv=self.rate_conv,
                               clk_period_ps=clk_period_ps, steps=HPCC_ENGINE_STEPS, runtime_cfg=True,
                               max_base_rtt_ns=hpcc_max_rtt_ns(self.line_kbps))
        if self.framer and mtu_bytes % 4:
            raise HwParamError(f"mtu_bytes must be a multiple of 4 with the RoCEv2 framer (the template's pad count "
                               f"is 0), not {mtu_bytes}")
        self.tx_frame = TxFrameBuilder(data_width=data_width, n_qps=n_qps, pattern_payload=True) \
            if self.framer else None
        self.csr = CsrBank(n_qps=n_qps, line_rate_reg=self.sched.line_rate_reg, n_counters=len(COUNTERS),
                           params=self.params, qp_init=True, rate_readback=True,
                           template_bytes=TEMPLATE_BYTES if self.framer else 0)
        qp = unsigned(self.qp_bits)
        super().__init__({
            "rx_s_axis": In(AxiStream(data_width)),
            "rx_m_axis": Out(AxiStream(data_width)),
            "cnp_req": Out(stream.Signature(qp)),
            "doorbell": In(stream.Signature(data.StructLayout({"qp": qp, "bytes": unsigned(PENDING_BITS)}))),
            "tx_m_axis": Out(AxiStream(data_width, user_width=self.qp_bits)),
            "csr_addr": In(ADDR_BITS), "csr_wdata": In(32), "csr_we": In(1), "csr_re": In(1),
            "csr_rdata": Out(32), "csr_ack": Out(1),
        })

    def param_addr(self, name: str) -> int:
        return self.csr.param_addr(name)

    def elaborate(self, platform):
        m = Module()
        sched, parser, np_, rp, csr = self.sched, self.parser, self.np, self.rp, self.csr
        m.submodules.sched = sched
        m.submodules.parser = parser
        m.submodules.np = np_
        m.submodules.rp = rp
        m.submodules.csr = csr
        m.submodules.int_ack = int_ack = self.int_ack
        m.submodules.hpcc_feed = feed = self.hpcc_feed
        m.submodules.hpcc = hp = self.hpcc
        m.submodules.int_fifo = int_fifo = SyncFIFO(width=len(int_ack.ack.payload.as_value()),
                                                    depth=self.event_fifo_depth)
        m.submodules.cnp_fifo = cnp_fifo = SyncFIFO(width=self.qp_bits, depth=self.event_fifo_depth)
        m.submodules.sent_fifo = sent_fifo = SyncFIFO(width=self.qp_bits + 16, depth=self.event_fifo_depth)
        m.submodules.rate_mirror = mirror = Memory(shape=32, depth=self.n_qps, init=[])

        # CSR bus and parameters
        m.d.comb += [csr.addr.eq(self.csr_addr), csr.wdata.eq(self.csr_wdata), csr.we.eq(self.csr_we),
                     csr.re.eq(self.csr_re), self.csr_rdata.eq(csr.rdata), self.csr_ack.eq(csr.ack)]
        for name, _ in DCQCN_CFG:
            m.d.comb += getattr(rp.cfg, name).eq(getattr(csr.param, name))
        m.d.comb += np_.cnp_interval_ns.eq(csr.param.cnp_interval_ns)
        for name, _ in HPCC_CFG:
            m.d.comb += getattr(hp.cfg, name).eq(getattr(csr.param, f"hpcc_{name}"))
        m.d.comb += [feed.qlen_unit_bytes.eq(csr.param.hpcc_qlen_unit_bytes),
                     feed.link_kbps.eq(csr.param.hpcc_line_rate_kbps)]
        mode_reset = next(p.reset for p in self.params if p.name == "cc_mode")
        dcqcn_on, hpcc_on = Signal(init=int(mode_reset == CC_MODE_DCQCN)), Signal(init=int(mode_reset == CC_MODE_HPCC))
        # the mode decoded into flip-flops (a new mode applies one clock after its CSR write): every engine's
        # ready and the rate source select start at a register, not at a compare of the CSR field
        m.d.sync += [dcqcn_on.eq(csr.param.cc_mode == CC_MODE_DCQCN), hpcc_on.eq(csr.param.cc_mode == CC_MODE_HPCC)]

        # RX: ICRC check, INT-echo ACK tap and parser pass-through; INT-echo ACK -> FIFO -> feeder -> HPCC engine
        m.submodules.icrc = icrc = self.icrc
        wiring.connect(m, wiring.flipped(self.rx_s_axis), icrc.s_axis)
        wiring.connect(m, icrc.m_axis, int_ack.s_axis)
        wiring.connect(m, int_ack.m_axis, parser.s_axis)
        m.d.comb += [int_fifo.w_data.eq(int_ack.ack.payload), int_fifo.w_en.eq(int_ack.ack.valid & hpcc_on),
                     int_ack.ack.ready.eq(int_fifo.w_rdy | ~hpcc_on),
                     feed.raw.payload.eq(int_fifo.r_data), feed.raw.valid.eq(int_fifo.r_rdy),
                     int_fifo.r_en.eq(feed.raw.ready)]
        wiring.connect(m, feed.hpcc, hp.ack)
        wiring.connect(m, parser.m_axis, wiring.flipped(self.rx_m_axis))
        ev_ce, ev_cnp, ev_qp, icrc_err = self._icrc_gate(m)
        # CE -> notification point, CNP -> FIFO -> reaction point (events of frames whose ICRC checked)
        m.d.comb += [np_.ce.payload.eq(ev_qp), np_.ce.valid.eq(ev_ce & dcqcn_on)]
        wiring.connect(m, np_.cnp_req, wiring.flipped(self.cnp_req))
        m.d.comb += [cnp_fifo.w_data.eq(ev_qp), cnp_fifo.w_en.eq(ev_cnp & dcqcn_on),
                     rp.cnp.payload.eq(cnp_fifo.r_data), rp.cnp.valid.eq(cnp_fifo.r_rdy),
                     cnp_fifo.r_en.eq(rp.cnp.ready)]
        # QP_INIT: held in one register (the CSR bank's handshake never waits on an engine's state); first the
        # QP's sent-frame count goes to 0 (when no count is being written), then the mode's engine takes the init:
        # neither step's enable waits on the other's state machine
        init_v, init_cleared, init_qp = Signal(), Signal(), Signal(self.qp_bits)
        init_take = Signal()
        m.d.comb += [csr.qp_init.ready.eq(~init_v),
                     feed.clear.eq(init_v & ~init_cleared & feed.clear_ok), feed.clear_qp.eq(init_qp),
                     rp.init.payload.eq(init_qp), rp.init.valid.eq(init_v & init_cleared & dcqcn_on),
                     hp.init.payload.eq(init_qp), hp.init.valid.eq(init_v & init_cleared & hpcc_on),
                     init_take.eq(init_v & init_cleared
                                  & Mux(dcqcn_on, rp.init.ready, Mux(hpcc_on, hp.init.ready, 1)))]
        with m.If(csr.qp_init.valid & ~init_v):
            m.d.sync += [init_v.eq(1), init_cleared.eq(0), init_qp.eq(csr.qp_init.payload)]
        with m.Elif(init_take):
            m.d.sync += init_v.eq(0)
        with m.If(feed.clear):
            m.d.sync += init_cleared.eq(1)

        # rates: CSR writes first, then the mode's engine's (the other engine's are discarded), through one
        # register stage (rq) so the source select and the limiter's line-rate clamp are in different clocks
        cc_valid = Signal()
        rq_v, rq_csr = Signal(), Signal()
        rq = Signal.like(sched.rate_wr.payload)
        rq_free = Signal()
        src_v = Signal()
        src = Signal.like(sched.rate_wr.payload)
        m.d.comb += [cc_valid.eq((rp.rate_wr.valid & dcqcn_on) | (hp.rate_wr.valid & hpcc_on)),
                     rq_free.eq(~rq_v | sched.rate_wr.ready)]
        with m.If(csr.rate_wr.valid):
            m.d.comb += [src_v.eq(1), src.eq(csr.rate_wr.payload), csr.rate_wr.ready.eq(rq_free),
                         rp.rate_wr.ready.eq(~dcqcn_on), hp.rate_wr.ready.eq(~hpcc_on)]
        with m.Else():
            m.d.comb += [src_v.eq(cc_valid), src.eq(Mux(hpcc_on, hp.rate_wr.payload, rp.rate_wr.payload)),
                         rp.rate_wr.ready.eq(rq_free | ~dcqcn_on), hp.rate_wr.ready.eq(rq_free | ~hpcc_on)]
        with m.If(rq_free):   # loads whatever is offered (the enable does not wait for the sources' valids)
            m.d.sync += [rq_v.eq(src_v), rq.eq(src), rq_csr.eq(csr.rate_wr.valid)]
        m.d.comb += [sched.rate_wr.valid.eq(rq_v), sched.rate_wr.payload.eq(rq)]
        rate_fire = rq_v & sched.rate_wr.ready
        line = sched.line_rate_reg
        wr = mirror.write_port()
        rd = mirror.read_port(transparent_for=(wr,))
        new_rate = rq.rate
        m.d.comb += [wr.addr.eq(rq.qp), wr.data.eq(Mux(new_rate > line, line, new_rate)),
                     wr.en.eq(rate_fire), rd.addr.eq(csr.qp_sel), csr.qp_rate_rd.eq(rd.data)]

        # TX: doorbells in, paced payloads framed (or, below 512 bits, out as they are); every payload's size
        # feeds its QP's byte counter
        wiring.connect(m, wiring.flipped(self.doorbell), sched.doorbell)
        if self.framer:
            self._tx_framer(m)
        else:
            wiring.connect(m, sched.m_axis, wiring.flipped(self.tx_m_axis))
        new_pkt = Signal()
        m.d.comb += [feed.sent.eq(sched.tx_started), feed.sent_qp.eq(sched.tx_last_qp),
                     new_pkt.eq(sched.tx_started & dcqcn_on),
                     sent_fifo.w_data.eq(sched.tx_last_qp | (sched.tx_last_len << self.qp_bits)),
                     sent_fifo.w_en.eq(new_pkt),
                     rp.sent.valid.eq(sent_fifo.r_rdy), rp.sent.payload.qp.eq(sent_fifo.r_data[:self.qp_bits]),
                     rp.sent.payload.bytes.eq(sent_fifo.r_data[self.qp_bits:]), sent_fifo.r_en.eq(rp.sent.ready)]

        # counters (an HPCC update: a new trace record of kind UPDATE)
        prev_trace = Signal(32)
        m.d.sync += prev_trace.eq(hp.trace_seq)
        hpcc_update = Signal()
        m.d.comb += hpcc_update.eq((hp.trace_seq != prev_trace) & (hp.trace_kind == KIND_UPDATE))
        cnt = {name: Signal(32, name=f"cnt_{name.lower()}") for name, _ in COUNTERS}
        own = {
            "CNP_SENT": self.cnp_req.valid & self.cnp_req.ready,
            "CLAMPS": csr.clamped,
            "RATE_UPDATES": rate_fire & ~rq_csr,
            "SENT_DROPPED": new_pkt & ~sent_fifo.w_rdy,
            "INT_ACKS_DROPPED": int_ack.ack.valid & hpcc_on & ~int_fifo.w_rdy,
            "HPCC_UPDATES": hpcc_update,
            "CE_SEEN": ev_ce,
            "CNP_RECEIVED": ev_cnp,
            "RX_EVENTS_DROPPED": dcqcn_on & ((ev_ce & ~np_.ce.ready) | (ev_cnp & ~cnp_fifo.w_rdy)),
            "RX_ICRC_ERRORS": icrc_err,
        }
        for name, event in own.items():
            with m.If(event):
                m.d.sync += cnt[name].eq(cnt[name] + 1)
        m.d.comb += [cnt["RX_ROCE"].eq(parser.roce_pkts), cnt["INT_ACKS"].eq(int_ack.int_acks),
                     cnt["TX_PKTS"].eq(sched.tx_pkts), cnt["TX_BYTES"].eq(sched.tx_bytes[:32]),
                     cnt["TX_FRAMES"].eq(self.tx_frame.frames if self.framer else sched.tx_pkts)]
        for i, (name, _) in enumerate(COUNTERS):
            m.d.comb += csr.counters[i].eq(cnt[name])
        return m

    def _tx_framer(self, m: Module) -> None:
        """Scheduler -> register slice -> ``tx_frame`` (pattern payload, templates from the CSR bank) -> tx_m_axis.

        Only the beats' framing (keep, last, QP) crosses the slice: the framer makes the payload.  A payload's size
        goes to the framer's descriptor FIFO as its first beat enters the slice, ahead of the beat; at most three
        first beats (two in the slice, one in the framer's first stage) wait, within the FIFO's four.
        """
        sched, txf, bpb = self.sched, self.tx_frame, self.data_width // 8
        m.submodules.tx_frame = txf
        sa = sched.m_axis
        m.submodules.tx_slice = sl = SkidBuffer(bpb + 1 + self.qp_bits)
        first = Signal(init=1)   # the scheduler's next beat starts a payload
        take = sa.tvalid & sa.tready
        with m.If(take):
            m.d.sync += first.eq(sa.tlast)
        m.d.comb += [sl.i_valid.eq(sa.tvalid), sa.tready.eq(sl.i_ready),
                     sl.i_data.eq(Cat(sa.tkeep, sa.tlast, sa.tuser)),
                     txf.desc.valid.eq(take & first), txf.desc.payload.qp.eq(sa.tuser),
                     txf.desc.payload.bytes.eq(sched.m_len)]
        fs = txf.s_axis
        m.d.comb += [fs.tvalid.eq(sl.o_valid), sl.o_ready.eq(fs.tready), fs.tdata.eq(0),
                     Cat(fs.tkeep, fs.tlast, fs.tuser).eq(sl.o_data)]
        wiring.connect(m, self.csr.tmpl_wr, txf.tmpl_wr)
        wiring.connect(m, txf.m_axis, wiring.flipped(self.tx_m_axis))

    def _icrc_gate(self, m: Module) -> tuple[Signal, Signal, Signal, Signal]:
        """Hold each frame's parser event until the frame's ICRC verdict; (CE, CNP, QP, ICRC error), registered.

        Frames are numbered as their last beats pass.  A parser event two clocks after a beat belongs to that
        beat's frame, a parser RoCE count four clocks after it; both are in their slot (``number mod
        EVENT_SLOTS``) before the frame's verdict, which arrives in frame order (>= 6 clocks after the last beat).
        """
        parser, icrc, rx = self.parser, self.icrc, self.rx_s_axis
        fid, vseq = Signal(EVENT_SLOT_BITS, name="rx_fid"), Signal(EVENT_SLOT_BITS, name="vseq")
        fid_late = [Signal(EVENT_SLOT_BITS, name=f"rx_fid{k}") for k in range(1, 5)]  # fid 1..4 clocks ago
        with m.If(rx.tvalid & rx.tready & rx.tlast):
            m.d.sync += fid.eq(fid + 1)
        m.d.sync += [late.eq(prev) for late, prev in zip(fid_late, [fid, *fid_late[:-1]], strict=True)]
        slot_ev, slot_cnp, slot_roce = Signal(EVENT_SLOTS), Signal(EVENT_SLOTS), Signal(EVENT_SLOTS)
        slot_qp = Array(Signal(self.qp_bits, name=f"slot_qp{i}") for i in range(EVENT_SLOTS))
        roce_bit = Signal()  # the parser's RoCE count moved: its low bit toggled
        m.d.sync += roce_bit.eq(parser.roce_pkts[0])
        new_roce = parser.roce_pkts[0] != roce_bit
        m.d.comb += [parser.ce.ready.eq(1), parser.cnp.ready.eq(1)]
        # the parser's event registered first (off its header decode), written to its slot the clock after
        event, ev_is_cnp, ev_fid, ev_in_qp = Signal(), Signal(), Signal(EVENT_SLOT_BITS), Signal(self.qp_bits)
        m.d.sync += [event.eq(parser.ce.valid | parser.cnp.valid), ev_is_cnp.eq(parser.cnp.valid),
                     ev_fid.eq(fid_late[1]), ev_in_qp.eq(parser.ce.payload)]
        for i in range(EVENT_SLOTS):
            with m.If(icrc.done & (vseq == i)):
                m.d.sync += [slot_ev[i].eq(0), slot_roce[i].eq(0)]
            with m.If(event & (ev_fid == i)):
                m.d.sync += [slot_ev[i].eq(1), slot_cnp[i].eq(ev_is_cnp), slot_qp[i].eq(ev_in_qp)]
            with m.If(new_roce & (fid_late[3] == i)):
                m.d.sync += slot_roce[i].eq(1)
        with m.If(icrc.done):
            m.d.sync += vseq.eq(vseq + 1)
        ev_ce, ev_cnp, ev_qp, err = Signal(), Signal(), Signal(self.qp_bits), Signal()
        judged = icrc.done & ~icrc.int_md
        ev = icrc.done & (icrc.ok | icrc.int_md) & slot_ev.bit_select(vseq, 1)
        m.d.sync += [ev_ce.eq(ev & ~slot_cnp.bit_select(vseq, 1)), ev_cnp.eq(ev & slot_cnp.bit_select(vseq, 1)),
                     ev_qp.eq(slot_qp[vseq]), err.eq(judged & ~icrc.ok & slot_roce.bit_select(vseq, 1))]
        return ev_ce, ev_cnp, ev_qp, err
