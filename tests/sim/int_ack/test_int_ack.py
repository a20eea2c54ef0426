"""pytest wrapper: the INT-echo ACK parser on Icarus at the default 1024-bit data path and at 64 bits."""

from __future__ import annotations

import pytest
from hwsim import run_block

from hw.int_ack import IntAckParser

pytestmark = pytest.mark.sim


@pytest.mark.parametrize("data_width", [1024, 64])
def test_int_ack_parser(data_width: int) -> None:
    dut = IntAckParser(data_width=data_width, n_qps=1024)
    figures = run_block(dut, toplevel="int_ack", test_module="tb_int_ack", simulator="icarus", tag=f"w{data_width}",
                        params={"qp_bits": dut.qp_bits, "frames": 120, "seed": data_width})
    print(f"\n{data_width} bits: {figures}")
    assert figures["events"] == figures["int_acks"] > 0
