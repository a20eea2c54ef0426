"""pytest wrapper: the TX RoCEv2 framer on Icarus and Verilator (512 and 1024 bits); its frames read by tshark."""

from __future__ import annotations

import pytest
from hwsim import SIM_BUILD, run_block
from roce_tx_check import check_roce_pcap

from hw.tx_frame import TxFrameBuilder

pytestmark = pytest.mark.sim

N_QPS = 8


@pytest.mark.parametrize("simulator, data_width", [("icarus", 512), ("verilator", 512), ("icarus", 1024),
                                                   ("verilator", 1024)])
def test_tx_frame(simulator: str, data_width: int) -> None:
    pcap = SIM_BUILD / f"tx_frame-w{data_width}-{simulator}.pcap"
    pcap.parent.mkdir(parents=True, exist_ok=True)
    pcap.unlink(missing_ok=True)
    dut = TxFrameBuilder(data_width=data_width, n_qps=N_QPS)
    figures = run_block(dut, toplevel="tx_frame", test_module="tb_tx_frame", simulator=simulator,
                        tag=f"w{data_width}", params={"data_width": data_width, "qp_bits": dut.qp_bits,
                                                      "n_frames": 60, "seed": data_width, "pcap": str(pcap)},
                        cxx_opt="-O0")  # Verilator: -Os builds the 1024-bit model in ~6 min, -O0 in ~30 s
    print(f"\n{simulator}: {figures}")
    assert figures["frames"] == 60 and figures["wrapped"] > 0
    _, decoded = check_roce_pcap(pcap)
    if not decoded:
        pytest.skip("tshark is not installed: frames checked against sw.roce only")
