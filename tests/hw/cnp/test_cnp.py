"""pytest wrapper: the CNP generator scoreboard on Icarus and Verilator (8 QPs, 2 us CNP interval)."""

from __future__ import annotations

import pytest
from hwsim import SIMULATORS, run_block

from hw.cnp import CnpGenerator
from sw.cc import DcqcnParams

pytestmark = pytest.mark.sim

N_QPS = 8
INTERVAL_NS = 2_000


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_cnp_generator(simulator: str) -> None:
    dut = CnpGenerator(n_qps=N_QPS, params=DcqcnParams(cnp_interval_ns=INTERVAL_NS))
    figures = run_block(dut, toplevel="cnp_gen", test_module="tb_cnp", simulator=simulator, tag="q8",
                        params={"n_qps": N_QPS, "cnp_interval_ns": INTERVAL_NS, "n_events": 1500, "seed": 5})
    print(f"\n{simulator}: {figures}")
    assert figures["cnps"] > 10
