"""pytest wrapper: the ICRC checker and generator on Icarus and Verilator at a narrow and a wide data width;
the generator's output frames are read back by tshark (an independent RoCEv2 decoder)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from hwsim import SIM_BUILD, SIMULATORS, run_block
from roce_tx_check import independent_icrc
from scapy.utils import rdpcap

from hw.icrc import IcrcChecker, IcrcGenerator
from sw.roce.wire.icrc import icrc

pytestmark = pytest.mark.sim

TSHARK = shutil.which("tshark")


@pytest.mark.parametrize("data_width", [64, 512])
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_icrc(simulator: str, data_width: int) -> None:
    figures = run_block(IcrcChecker(data_width=data_width), toplevel="icrc_check", test_module="tb_icrc",
                        simulator=simulator, tag=f"w{data_width}", params={"n_frames": 120, "seed": data_width})
    print(f"\n{simulator}: {figures}")
    assert figures["frames"] == 120 and min(figures["layouts"].values()) >= 20, figures


@pytest.mark.parametrize("simulator, data_width", [("icarus", 64), ("verilator", 64), ("icarus", 512),
                                                   ("verilator", 1024)])
def test_icrc_gen(simulator: str, data_width: int) -> None:
    """Icarus stops at 512 bits: the 1024-bit XOR trees make it minutes slower than Verilator."""
    assert simulator in SIMULATORS
    pcap = SIM_BUILD / f"icrc_gen-w{data_width}-{simulator}.pcap"
    pcap.parent.mkdir(parents=True, exist_ok=True)
    figures = run_block(IcrcGenerator(data_width=data_width), toplevel="icrc_gen", test_module="tb_icrc_gen",
                        simulator=simulator, tag=f"w{data_width}",
                        params={"n_frames": 48, "seed": data_width, "pcap": str(pcap)},
                        cxx_opt="-O0" if data_width >= 512 else None)   # the 1024-bit XOR trees: -Os ~5 min
    print(f"\n{simulator}: {figures}")
    assert figures["frames"] == 72 and min(figures["ipv4"], figures["ipv6"], figures["vlan"]) >= 18
    frames = [bytes(p) for p in rdpcap(str(pcap))]
    reference = independent_icrc()
    for frame in frames:
        plain = frame[:12] + frame[16:] if frame[12:14] == b"\x81\x00" else frame
        assert icrc(plain[14:]) == reference(plain) == int.from_bytes(frame[-4:], "little")
    if TSHARK is None:
        pytest.skip("tshark is not installed: ICRC checked against sw.roce.wire.icrc and the bitwise CRC only")
    out = subprocess.run([TSHARK, "-o", "ip.check_checksum:TRUE", "-r", str(pcap), "-T", "json"],
                         capture_output=True, text=True, timeout=120, check=True)
    dissected = json.loads(out.stdout)
    assert len(dissected) == len(frames)
    # the first 48 frames are well formed; the rest carry stray bytes beyond their IP length, which tshark
    # rightly reads as an Ethernet trailer
    for frame, packet in zip(frames[:48], dissected[:48], strict=True):
        layers = packet["_source"]["layers"]
        assert layers["frame"]["frame.protocols"].split(":")[-2:] in (["udp", "infiniband"],
                                                                    ["infiniband", "data"]), layers["frame"]
        assert ("vlan" in layers) == (frame[12:14] == b"\x81\x00")
        ib = layers["infiniband"]
        if int(ib["infiniband.bth_tree"]["infiniband.bth.opcode"]) == 0x81:  # CNP: a vendor opcode to tshark
            assert ib["infiniband.vendor_tree"]["infiniband.vendor"].replace(":", "").endswith(frame[-4:].hex())
        else:  # tshark prints the ICRC field it found at the end of the packet (it does not verify it)
            assert int(ib["infiniband.invariant.crc"], 16) == int.from_bytes(frame[-4:], "big")
