"""pytest wrapper: the DCQCN reaction-point scoreboard on Icarus and Verilator (8 QPs, short timers)."""

from __future__ import annotations

import dataclasses

import pytest
from hwsim import SIMULATORS, run_block

from hw.dcqcn import DcqcnRpEngine
from sw.cc import DcqcnParams

pytestmark = pytest.mark.sim

N_QPS = 8
MTU = 4096
CLK_HZ = 400_000_000
# short timers (2 / 3 us) and a 20 kB byte counter so a few thousand events walk every stage
PARAMS = DcqcnParams(line_rate_kbps=25_600_000, alpha_timer_ns=2_000, rate_timer_ns=3_000,
                     byte_counter_bytes=20_000)
# (events, probability of a CNP, max idle clocks between events): congestion, recovery, mixed
PHASES = [(300, 0.7, 20), (1200, 0.0, 12), (300, 0.3, 40)]


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_dcqcn_rp(simulator: str) -> None:
    dut = DcqcnRpEngine(n_qps=N_QPS, params=PARAMS, clk_period_ps=2500, mtu_bytes=MTU)
    figures = run_block(dut, toplevel="dcqcn_rp", test_module="tb_dcqcn", simulator=simulator, tag="q8",
                        params={"n_qps": N_QPS, "mtu_bytes": MTU, "clk_hz": CLK_HZ, "seed": 3,
                                "dcqcn": dataclasses.asdict(PARAMS), "phases": PHASES})
    print(f"\n{simulator}: {figures}")
    assert figures["records"] > 100
