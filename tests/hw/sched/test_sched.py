"""pytest wrapper: the TxScheduler cocotb testbench on Icarus and Verilator (small QP count and width); Verilator's
run charges a frame overhead (a wire rate, as nic_cc_top's framer build has it), Icarus's none (a payload rate)."""

from __future__ import annotations

import pytest
from hwsim import SIMULATORS, run_block

from hw.sched import TxScheduler

pytestmark = pytest.mark.sim

PARAMS = {"data_width": 64, "n_qps": 8, "mtu_bytes": 96, "burst_bytes": 128}
# bytes a send charges beyond its payload (nic_cc_top's framer build: 82); 20 keeps 4 QPs at 40 % each above line
OVERHEAD_BYTES = {"verilator": 20, "icarus": 0}


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_sched(simulator: str) -> None:
    params = {**PARAMS, "frame_overhead_bytes": OVERHEAD_BYTES[simulator]}
    dut = TxScheduler(**params)
    n_rates = 100 if simulator == "verilator" else 8  # Icarus is ~20x slower: a short run there
    figures = run_block(dut, toplevel="tx_sched", test_module="tb_sched", simulator=simulator,
                        tag=f"w64q8o{params['frame_overhead_bytes']}",
                        params={**params, "qp_bits": dut.qp_bits, "n_rates": n_rates, "seed": 1,
                                "n_actions": 600 if simulator == "verilator" else 300})
    print(f"\n{simulator}: {figures}")
    assert figures["worst_rate_error"] <= 1e-3
    assert figures["jain"] >= 0.99
    assert figures["scoreboard_visits"] > 1000
