"""pytest wrapper: the ICRC checker on Icarus and Verilator at a narrow and a wide data width."""

from __future__ import annotations

import pytest
from hwsim import SIMULATORS, run_block

from hw.icrc import IcrcChecker

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("data_width", [64, 512])
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_icrc(simulator: str, data_width: int) -> None:
    figures = run_block(IcrcChecker(data_width=data_width), toplevel="icrc_check", test_module="tb_icrc",
                        simulator=simulator, tag=f"w{data_width}", params={"n_frames": 120, "seed": data_width})
    print(f"\n{simulator}: {figures}")
    assert figures["frames"] == 120
