"""pytest wrapper: the TX RoCEv2 framer on Icarus and Verilator (512 and 1024 bits); its frames read by tshark."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
from hwsim import SIM_BUILD, run_block
from scapy.utils import rdpcap

from hw.tx_frame import TxFrameBuilder
from sw.roce.icrc import icrc

pytestmark = pytest.mark.sim

TSHARK = shutil.which("tshark")
N_QPS = 8


def _independent_icrc():
    """The bitwise, mask-based ICRC of tests/unit/test_roce_icrc.py (shares nothing with zlib or the RTL)."""
    path = Path(__file__).resolve().parents[2] / "unit" / "test_roce_icrc.py"
    spec = importlib.util.spec_from_file_location("roce_icrc_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._independent_icrc


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
    frames = [bytes(p) for p in rdpcap(str(pcap))]
    reference = _independent_icrc()
    for frame in frames:
        assert icrc(frame[14:]) == reference(frame) == int.from_bytes(frame[-4:], "little")
    if TSHARK is None:
        pytest.skip("tshark is not installed: frames checked against sw.roce only")
    fields = ["ip.len", "ip.checksum.status", "udp.length", "infiniband.bth.opcode", "infiniband.bth.destqp",
              "infiniband.bth.psn", "infiniband.invariant.crc", "frame.protocols"]
    # rpcordma's heuristic would take a random SEND payload (ICRC included) as an RPC message
    out = subprocess.run([TSHARK, "--disable-protocol", "rpcordma", "-o", "ip.check_checksum:TRUE", "-r",
                          str(pcap), "-T", "fields", "-E", "separator=;", *[a for f in fields for a in ("-e", f)]],
                         capture_output=True, text=True, timeout=120, check=True)
    rows = [line.split(";") for line in out.stdout.splitlines()]
    assert len(rows) == len(frames)
    for frame, row in zip(frames, rows, strict=True):
        ip_len, csum_status, udp_len, opcode, dest_qp, psn, crc, protocols = row
        assert protocols.endswith(":ip:udp:infiniband:data"), protocols
        assert (int(ip_len), int(udp_len)) == (len(frame) - 14, len(frame) - 34)
        assert csum_status == "1", f"tshark: IPv4 checksum status {csum_status} (1 = good)"
        assert int(opcode) == frame[42] and int(dest_qp, 0) == int.from_bytes(frame[47:50], "big")
        assert int(psn) == int.from_bytes(frame[51:54], "big")
        assert int(crc, 16) == int.from_bytes(frame[-4:], "big")
