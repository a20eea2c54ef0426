"""pytest wrapper: the CSR bank on Icarus and Verilator."""

from __future__ import annotations

import pytest
from hwsim import SIMULATORS, run_block

from hw.csr import CsrBank

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_csr(simulator: str) -> None:
    line = 8 << 24
    figures = run_block(CsrBank(n_qps=16, line_rate_reg=line, n_counters=3), toplevel="csr_bank",
                        test_module="tb_csr", simulator=simulator, tag="q16",
                        params={"n_qps": 16, "qp_bits": 4, "line_rate_reg": line, "n_counters": 3,
                                "n_ops": 400, "seed": 9})
    assert figures["rate_writes"] > 20
