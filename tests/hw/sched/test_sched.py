"""pytest wrapper: the TxScheduler cocotb testbench on Icarus and Verilator (small QP count and width)."""

from __future__ import annotations

import pytest
from hwsim import SIMULATORS, run_block

from hw.sched import TxScheduler

pytestmark = pytest.mark.sim

PARAMS = {"data_width": 64, "n_qps": 8, "mtu_bytes": 96, "burst_bytes": 128}


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_sched(simulator: str) -> None:
    dut = TxScheduler(**PARAMS)
    n_rates = 100 if simulator == "verilator" else 8  # Icarus is ~20x slower: a short run there
    figures = run_block(dut, toplevel="tx_sched", test_module="tb_sched", simulator=simulator,
                        tag="w64q8", params={**PARAMS, "qp_bits": dut.qp_bits, "n_rates": n_rates, "seed": 1,
                                             "n_actions": 600 if simulator == "verilator" else 300})
    print(f"\n{simulator}: {figures}")
    assert figures["worst_rate_error"] <= 1e-3
    assert figures["jain"] >= 0.99
    assert figures["scoreboard_visits"] > 1000
