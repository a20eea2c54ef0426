"""pytest wrappers: the INT-echo ACK parser on Icarus (1024- and 64-bit data paths), and the parser -> HPCC feeder ->
HPCC engine chain across 24-bit PSN wraps against sw.cc.Hpcc (Icarus and Verilator)."""

from __future__ import annotations

import dataclasses

import pytest
from amaranth.hdl import Module, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from hwsim import SIMULATORS, run_block

from hw.hpcc import QP_STATE, HpccEngine
from hw.int_ack import MAX_INT_HOPS, HpccAckFeeder, IntAckParser
from hw.lib.stream import AxiStream
from sw.cc import HpccParams

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("data_width", [1024, 64])
def test_int_ack_parser(data_width: int) -> None:
    dut = IntAckParser(data_width=data_width, n_qps=1024)
    figures = run_block(dut, toplevel="int_ack", test_module="tb_int_ack", simulator="icarus", tag=f"w{data_width}",
                        params={"qp_bits": dut.qp_bits, "frames": 120, "seed": data_width})
    print(f"\n{data_width} bits: {figures}")
    assert figures["events"] == figures["int_acks"] > 0


class HpccRxChain(wiring.Component):
    """nic_cc_top's HPCC receive path alone: IntAckParser -> HpccAckFeeder -> HpccEngine (built-in constants)."""

    def __init__(self, *, data_width: int, n_qps: int, params: HpccParams) -> None:
        self.parser = IntAckParser(data_width=data_width, n_qps=n_qps)
        self.feed = HpccAckFeeder(n_qps=n_qps, max_hops=MAX_INT_HOPS)
        self.engine = HpccEngine(n_qps=n_qps, max_hops=MAX_INT_HOPS, params=params)
        qp = unsigned(self.feed.qp_bits)
        super().__init__({
            "s_axis": In(AxiStream(data_width)),
            "sent": In(1), "sent_qp": In(qp),
            "clear": In(1), "clear_qp": In(qp), "clear_seq": In(64), "clear_ok": Out(1),
            "qlen_unit_bytes": In(16), "link_kbps": In(32),
            "init": In(stream.Signature(qp)),
            "rate_wr": Out(self.engine.signature.members["rate_wr"].signature),
            "trace_seq": Out(32), "trace_kind": Out(3), "trace_qp": Out(qp), "trace_state": Out(QP_STATE),
            "int_acks": Out(32), "dropped": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.parser = parser = self.parser
        m.submodules.feed = feed = self.feed
        m.submodules.engine = engine = self.engine
        wiring.connect(m, wiring.flipped(self.s_axis), parser.s_axis)
        wiring.connect(m, parser.ack, feed.raw)
        wiring.connect(m, feed.hpcc, engine.ack)
        wiring.connect(m, wiring.flipped(self.init), engine.init)
        wiring.connect(m, engine.rate_wr, wiring.flipped(self.rate_wr))
        m.d.comb += [parser.m_axis.tready.eq(1),
                     feed.sent.eq(self.sent), feed.sent_qp.eq(self.sent_qp), feed.clear.eq(self.clear),
                     feed.clear_qp.eq(self.clear_qp), feed.clear_seq.eq(self.clear_seq),
                     self.clear_ok.eq(feed.clear_ok),
                     feed.qlen_unit_bytes.eq(self.qlen_unit_bytes), feed.link_kbps.eq(self.link_kbps),
                     self.trace_seq.eq(engine.trace_seq), self.trace_kind.eq(engine.trace_kind),
                     self.trace_qp.eq(engine.trace_qp), self.trace_state.eq(engine.trace_state),
                     self.int_acks.eq(parser.int_acks), self.dropped.eq(parser.dropped)]
        return m


# 100 Gb/s, T = 10 us, max_stage 3 so additive runs end; ACKs, rounds of sent pulses + ACKs, seed per simulator
CHAIN_PARAMS = HpccParams(line_rate_kbps=100_000_000, base_rtt_ns=10_000, max_stage=3)
CHAIN_RUNS = {"icarus": (40, 21), "verilator": (160, 22)}


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_feeder_sequences_across_psn_wraps_like_sw_cc_hpcc(simulator: str) -> None:
    rounds, seed = CHAIN_RUNS[simulator]
    dut = HpccRxChain(data_width=64, n_qps=8, params=CHAIN_PARAMS)
    figures = run_block(dut, toplevel="hpcc_rx", test_module="tb_hpcc_rx", simulator=simulator, tag="w64q8",
                        params={"qp_bits": dut.feed.qp_bits, "n_qps": 8, "hpcc": dataclasses.asdict(CHAIN_PARAMS),
                                "qlen_unit_bytes": 1078, "rounds": rounds, "seed": seed,
                                "ack_clocks": dut.engine.ack_ii_clocks(MAX_INT_HOPS) + 16,
                                "tx_dividend_bits": dut.engine.div_widths["t"][0]})
    print(f"\n{simulator}: {figures}")
    assert figures["mismatches"] == 0 and min(figures["updates"], figures["wrap_acks"], figures["ts_jumps"]) > 0
