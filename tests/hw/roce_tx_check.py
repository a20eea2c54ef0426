"""Shared checks of the RTL's TX RoCEv2 frames (tx_frame, nic_cc_top): the test flows, and a pcap of frames judged
by sw.roce's ICRC, an independent bitwise ICRC and tshark's RoCEv2 dissector."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

from scapy.utils import rdpcap

from sw.roce import Flow
from sw.roce.wire.icrc import icrc

TSHARK = shutil.which("tshark")


def tx_flow(qp: int) -> Flow:
    """The flow of QP ``qp`` in the TX tests (distinct QPNs and TTLs per QP)."""
    return Flow(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1", dst_ip="10.0.1.2",
                src_qpn=0x300 + qp, dst_qpn=0x5000 + 7 * qp, ttl=64 - qp)


def independent_icrc():
    """The bitwise, mask-based ICRC of tests/sw/roce/wire/test_roce_icrc.py (shares nothing with zlib or the RTL)."""
    path = Path(__file__).resolve().parents[1] / "sw" / "roce" / "wire" / "test_roce_icrc.py"
    spec = importlib.util.spec_from_file_location("roce_icrc_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._independent_icrc


def check_roce_pcap(pcap: Path) -> tuple[list[bytes], bool]:
    """Every frame of ``pcap``: ICRC valid (sw.roce and the independent ICRC agree with its last 4 bytes) and, when
    tshark is installed, decoded as IPv4/UDP/RoCEv2 data with the frame's lengths, good IPv4 checksum, opcode, QP,
    PSN and ICRC.  Returns (the frames, whether tshark ran)."""
    frames = [bytes(p) for p in rdpcap(str(pcap))]
    reference = independent_icrc()
    for frame in frames:
        assert icrc(frame[14:]) == reference(frame) == int.from_bytes(frame[-4:], "little")
    if TSHARK is None:
        return frames, False
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
    return frames, True


def check_pattern_pcap(pcap: Path, n_frames: int, qp: int, mtu_bytes: int) -> None:
    """``check_roce_pcap`` of a capture of one RTL QP, and it holds exactly ``n_frames`` SEND ONLY frames with PSNs
    0..n-1 in order, each carrying the NIC's pattern payload of ``mtu_bytes``."""
    from sw.roce.wire.pattern import pattern_payload

    frames, _ = check_roce_pcap(pcap)
    assert len(frames) == n_frames
    psns = [int.from_bytes(f[51:54], "big") for f in frames]
    assert psns == list(range(n_frames))
    for f, psn in zip(frames, psns, strict=True):
        assert f[42] == 0x04 and f[54:-4] == pattern_payload(qp, psn, mtu_bytes), f"PSN {psn}"
