"""pytest wrapper: the NIC CC top level end to end on Icarus and Verilator (64-bit data path, 8 QPs)."""

from __future__ import annotations

import dataclasses

import pytest
from hwsim import SIMULATORS, run_block

from hw.nic_top import NicCcTop
from sw.cc import DcqcnParams

pytestmark = pytest.mark.sim

SIZES = {"data_width": 64, "n_qps": 8, "mtu_bytes": 64, "burst_bytes": 128}
# the DCQCN line rate a quarter of the 25.6 Gb/s data path, so two QPs never saturate it; 8 us timers; the
# byte counter at its maximum so only CNPs and timers move the rates the test reads back
DCQCN = DcqcnParams(line_rate_kbps=6_400_000, alpha_timer_ns=8_000, rate_timer_ns=8_000,
                    byte_counter_bytes=(1 << 32) - 1, cnp_interval_ns=1_600)


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_nic_top(simulator: str) -> None:
    dut = NicCcTop(**SIZES)
    figures = run_block(dut, toplevel="nic_cc_top", test_module="tb_nic_top", simulator=simulator, tag="w64q8",
                        params={**SIZES, "qp_bits": dut.qp_bits, "param_names": [p.name for p in dut.params],
                                "dcqcn": dataclasses.asdict(DCQCN), "cnp_interval_ns": DCQCN.cnp_interval_ns,
                                "ce_bursts": 30, "window_clocks": 2000, "seed": 4})
    print(f"\n{simulator}: {figures}")
    assert figures["cnp_requests"] > 5
    assert figures["rp"]["cnp2_rate_kbps"] == DCQCN.line_rate_kbps // 4
