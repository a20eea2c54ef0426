"""pytest wrapper: the HPCC engine scoreboard on Icarus (short run) and Verilator (long run), 4 INT hops."""

from __future__ import annotations

import dataclasses

import pytest
from hwsim import run_block

from hw.hpcc import HpccEngine
from sw.cc import HpccParams

pytestmark = pytest.mark.sim

MAX_HOPS = 4
CLK_HZ = 400_000_000
# max_stage 3 so additive runs reach it; a 32-bit INT timestamp so wraps happen within the run
PARAMS = HpccParams(line_rate_kbps=100_000_000, base_rtt_ns=10_000, max_stage=3, int_ts_bits=32)
# QPs, ACKs, seed, coverage required (the short Icarus run only records it)
RUNS = {"icarus": (2, 150, 5, False), "verilator": (8, 4000, 7, True)}


@pytest.mark.parametrize("simulator", sorted(RUNS))
def test_hpcc_engine(simulator: str) -> None:
    n_qps, acks, seed, cover = RUNS[simulator]
    dut = HpccEngine(n_qps=n_qps, max_hops=MAX_HOPS, params=PARAMS, clk_period_ps=2500, steps=2)
    figures = run_block(dut, toplevel="hpcc", test_module="tb_hpcc", simulator=simulator, tag=f"q{n_qps}",
                        params={"n_qps": n_qps, "max_hops": MAX_HOPS, "clk_hz": CLK_HZ, "seed": seed,
                                "steps": 2, "acks": acks, "require_coverage": cover,
                                "hpcc": dataclasses.asdict(PARAMS)})
    print(f"\n{simulator}: {figures}")
    assert figures["acks"] == acks and figures["mismatches"] == 0
