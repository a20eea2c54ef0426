"""pytest wrapper: the RoCEv2 parser (IPv4, IPv6, 802.1Q) on Icarus and Verilator, at a narrow and at a
single-beat-header width."""

from __future__ import annotations

import pytest
from hwsim import SIMULATORS, run_block

from hw.parser import RoceParser

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("data_width", [64, 512])
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_parser(simulator: str, data_width: int) -> None:
    dut = RoceParser(data_width=data_width, n_qps=16)
    figures = run_block(dut, toplevel="roce_parser", test_module="tb_parser", simulator=simulator,
                        tag=f"w{data_width}", params={"n_frames": 150, "qp_bits": 4, "seed": data_width})
    print(f"\n{simulator}: {figures}")
    assert figures["ce"] > 5 and figures["cnp"] > 5
    assert min(figures["roce"].values()) > 10, figures["roce"]  # IPv4, IPv6 and 802.1Q-tagged RoCE frames
