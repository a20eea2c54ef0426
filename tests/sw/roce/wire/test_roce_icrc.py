"""ICRC: our implementation vs a real NIC capture, an independent bitwise CRC and Scapy's contrib layer."""

from __future__ import annotations

import pytest
from scapy.layers.l2 import Ether

from sw.roce import ECN_CE, ECN_ECT0, Flow, IcrcMismatchError, Opcode, decode, scapy_frame
from sw.roce.wire.ecn import ecn_of, mark_ce
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.headers import BTH
from sw.roce.wire.icrc import icrc, wire_icrc
from sw.roce.wire.opcodes import LAYOUTS

pytestmark = pytest.mark.unit

# A CNP captured on a Mellanox ConnectX-4 Lx, as published in Scapy's regression tests
# (github.com/secdev/scapy, test/contrib/roce.uts, "RoCE CNP captured on ConnectX-4 Lx").  The last 4 bytes
# are the ICRC the NIC computed.
CX4LX_CNP = bytes.fromhex(
    "e41d2dab2bc27cfe90643b32080045c2"
    "003c718c4000401191610a0011010a00"
    "1201000012b700280000" "8100ffff4000"
    "01180000000000000000000000000000"
    "00000000000082fd002a"
)

FLOW_V4 = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.1.2.3", "10.4.5.6", 0x0000AB, 0x000CDE)
FLOW_V6 = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "fd00:1::3", "fd00:2::6", 0x0000AB, 0x000CDE)


def _bitwise_crc32(data: bytes) -> int:
    """CRC-32 (IEEE 802.3, reflected) one bit at a time: shares nothing with zlib."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0xEDB88320 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _independent_icrc(frame: bytes) -> int:
    """ICRC from the annex's field list, masking through a per-byte mask instead of slicing headers."""
    ip = frame[14:-4]
    mask = bytearray(len(ip))        # 0xff where a field is replaced by 1s
    if ip[0] >> 4 == 4:
        ihl = (ip[0] & 15) * 4
        for off in (1, 8, 10, 11):   # TOS, TTL, header checksum
            mask[off] = 0xFF
    else:
        ihl = 40
        mask[0] = 0x0F               # traffic class high nibble
        for off in (1, 2, 3, 7):     # traffic class low nibble + flow label, hop limit
            mask[off] = 0xFF
    for off in (ihl + 6, ihl + 7, ihl + 8 + 4):  # UDP checksum, BTH resv8a
        mask[off] = 0xFF
    masked = bytes(b | m for b, m in zip(ip, mask, strict=True))
    return _bitwise_crc32(b"\xff" * 8 + masked)


def test_real_connectx4_cnp_icrc_matches():
    assert icrc(CX4LX_CNP[14:]) == wire_icrc(CX4LX_CNP[14:]) == 0x2A00FD82
    assert _independent_icrc(CX4LX_CNP) == 0x2A00FD82


def test_real_connectx4_cnp_decodes():
    pkt = decode(CX4LX_CNP)
    assert pkt.opcode == Opcode.CNP and pkt.dest_qp == 0x118 and pkt.becn and not pkt.fecn
    assert pkt.icrc_ok is True
    assert (pkt.dscp, pkt.ecn, pkt.src_ip, pkt.dst_ip) == (48, ECN_ECT0, "10.0.17.1", "10.0.18.1")
    assert len(pkt.payload) == 0


def test_scapy_contrib_icrc_agrees_on_the_real_capture():
    pkt = Ether(CX4LX_CNP)
    wire = pkt[BTH].icrc
    del pkt[BTH].icrc
    assert Ether(bytes(pkt))[BTH].icrc == wire


@pytest.mark.parametrize("flow", [FLOW_V4, FLOW_V6], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("opcode", list(LAYOUTS), ids=lambda op: op.name)
def test_three_implementations_agree(flow: Flow, opcode: Opcode):
    payload = bytes(range(7)) if LAYOUTS[opcode].has_payload else b""
    frame = scapy_frame(flow, opcode, psn=0x123456, payload=payload, ecn=ECN_ECT0,
        ext=HeaderFields(va=0x1122334455667788, rkey=0xAABBCCDD, dma_len=7, immdt=0x01020304, syndrome=0x60, msn=42))
    ours = icrc(frame[14:])
    assert ours == wire_icrc(frame[14:])          # Scapy's contrib wrote this one
    assert ours == _independent_icrc(frame)


@pytest.mark.parametrize("flow", [FLOW_V4, FLOW_V6], ids=["ipv4", "ipv6"])
def test_masked_fields_do_not_change_icrc(flow: Flow):
    frame = bytearray(scapy_frame(flow, Opcode.SEND_ONLY, psn=9, payload=b"abcdefgh"))
    before = icrc(bytes(frame[14:]))
    if flow.ip_version == 4:
        frame[15] ^= 0xFF    # TOS
        frame[22] -= 3       # TTL
        frame[24] ^= 0x55    # checksum
        udp = 34
    else:
        frame[14] ^= 0x0F
        frame[15] ^= 0xFF    # traffic class + flow label
        frame[21] -= 3       # hop limit
        udp = 54
    frame[udp + 6] ^= 0x12   # UDP checksum
    frame[udp + 8 + 4] = 0xC0  # FECN + BECN
    assert icrc(bytes(frame[14:])) == before


@pytest.mark.parametrize("flow", [FLOW_V4, FLOW_V6], ids=["ipv4", "ipv6"])
def test_covered_byte_change_is_an_icrc_mismatch(flow: Flow):
    frame = bytearray(scapy_frame(flow, Opcode.RDMA_WRITE_ONLY, psn=1, payload=b"x" * 64,
        ext=HeaderFields(va=4096, rkey=1, dma_len=64)))
    frame[-10] ^= 0x01       # one payload bit
    with pytest.raises(IcrcMismatchError) as exc:
        decode(bytes(frame))
    assert exc.value.offset == len(frame) - 4
    assert "ICRC" in str(exc.value)
    assert decode(bytes(frame), raise_on_bad_icrc=False).icrc_ok is False


@pytest.mark.parametrize("flow", [FLOW_V4, FLOW_V6], ids=["ipv4", "ipv6"])
def test_ce_marking_keeps_icrc_and_is_preserved(flow: Flow):
    frame = scapy_frame(flow, Opcode.RDMA_WRITE_MIDDLE, psn=77, payload=b"\x01" * 100)
    assert ecn_of(frame) == ECN_ECT0
    marked = mark_ce(frame)
    assert ecn_of(marked) == ECN_CE
    pkt = decode(marked)                          # IPv4 checksum and ICRC still verify
    assert pkt.ecn == ECN_CE and pkt.icrc_ok and pkt.dscp == flow.dscp
    assert mark_ce(marked) == marked              # CE stays CE
    not_ect = scapy_frame(flow, Opcode.RDMA_WRITE_MIDDLE, psn=77, payload=b"\x01" * 100, ecn=0)
    assert mark_ce(not_ect) == not_ect            # not-ECT traffic is never marked
