"""Fast decoder: round trips, Scapy dissection of our layers, typed errors with offsets, and fuzzing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from sw.roce import (
    BadLengthError,
    BadVersionError,
    Flow,
    FlowTemplates,
    NotRoceError,
    Opcode,
    RoceFormatError,
    TruncatedFrameError,
    UnsupportedOpcodeError,
    decode,
    scapy_frame,
)
from sw.roce.wire.errors import IpChecksumError
from sw.roce.wire.fields import FIELDS_OF_HEADER, HeaderFields
from sw.roce.wire.headers import AETH, BTH, RETH, AtomicAckETH, AtomicETH, CNPPadding, ImmDt, layer_class
from sw.roce.wire.opcodes import LAYOUTS

pytestmark = pytest.mark.unit

FLOW = Flow("02:00:00:00:00:0a", "02:00:00:00:00:0b", "10.9.0.1", "10.9.0.2", 0x000101, 0x000202)
FLOW6 = Flow("02:00:00:00:00:0a", "02:00:00:00:00:0b", "fd00::a", "fd00::b", 0x000101, 0x000202)
TPL = FlowTemplates(FLOW)
TPL6 = FlowTemplates(FLOW6)
BTH_AT = 14 + 20 + 8
FIELDS = HeaderFields(va=0x0000_7F00_DEAD_0000, rkey=0x1234_5678, dma_len=300, immdt=0xFEED_BEEF, syndrome=0x1F,
                     msn=0x00_0A_0B, swapdt=0x0102_0304_0506_0708, cmpdt=0x1112_1314_1516_1718,
                     orig_rem_dt=0x2122_2324_2526_2728)


def _valid(opcode: Opcode = Opcode.SEND_ONLY, payload: bytes = b"hello world") -> bytes:
    return TPL[opcode].build(0x00ABCD, payload if LAYOUTS[opcode].has_payload else b"", ackreq=True, ext=FIELDS)


@pytest.mark.parametrize("flow", [FLOW, FLOW6], ids=["ipv4", "ipv6"])
@pytest.mark.parametrize("opcode", list(LAYOUTS), ids=lambda op: op.name)
def test_round_trip_every_opcode(flow: Flow, opcode: Opcode):
    payload = b"payload!!" if LAYOUTS[opcode].has_payload else b""
    frame = FlowTemplates(flow)[opcode].build(77, payload, ackreq=True, ext=FIELDS)
    pkt = decode(frame)
    assert pkt.opcode == opcode and pkt.psn == 77 and pkt.ackreq and pkt.dest_qp == flow.dst_qpn
    assert bytes(pkt.payload) == payload and pkt.pad_count == (-len(payload) & 3)
    assert (pkt.src_ip, pkt.dst_ip, pkt.ip_version) == (flow.src_ip, flow.dst_ip, flow.ip_version)
    assert pkt.src_mac == flow.src_mac_bytes and pkt.dst_mac == flow.dst_mac_bytes
    assert pkt.udp_sport == flow.udp_sport and pkt.icrc_ok
    present = {name for header in LAYOUTS[opcode].headers for name in FIELDS_OF_HEADER[header]}
    for name in ("va", "rkey", "dma_len", "immdt", "syndrome", "msn", "swapdt", "cmpdt", "orig_rem_dt"):
        assert getattr(pkt, name) == (getattr(FIELDS, name) if name in present else None), name


@pytest.mark.parametrize("opcode", list(LAYOUTS), ids=lambda op: op.name)
def test_scapy_dissects_our_layers(opcode: Opcode):
    pkt = Ether(_valid(opcode))
    assert pkt[BTH].opcode == opcode and pkt[BTH].psn == 0x00ABCD and pkt[BTH].dqpn == FLOW.dst_qpn
    chain = [type(layer) for layer in pkt[BTH].iterpayloads()][1:]
    expected = [layer_class(h) for h in LAYOUTS[opcode].headers]
    assert chain[:len(expected)] == expected
    assert chain[len(expected):] == ([Raw] if LAYOUTS[opcode].has_payload else [])
    for header_class, names in ((RETH, ("va", "rkey", "dma_len")), (ImmDt, ("immdt",)), (AETH, ("syndrome", "msn")),
                                (AtomicETH, ("va", "rkey", "swapdt", "cmpdt")), (AtomicAckETH, ("orig_rem_dt",))):
        if header_class in pkt:
            assert all(getattr(pkt[header_class], n) == getattr(FIELDS, n) for n in names)
    if opcode == Opcode.CNP:
        assert CNPPadding in pkt and pkt[BTH].becn == 1


def test_stacking_a_header_on_a_bare_bth_picks_its_usual_opcode():
    for header, opcode in ((AETH, Opcode.ACKNOWLEDGE), (RETH, Opcode.RDMA_WRITE_ONLY),
                           (ImmDt, Opcode.SEND_ONLY_WITH_IMMEDIATE), (AtomicETH, Opcode.FETCH_ADD),
                           (CNPPadding, Opcode.CNP)):
        assert (BTH() / header()).opcode == opcode, header.__name__


def test_vlan_tag_and_ethernet_padding_are_handled():
    frame = _valid(Opcode.ACKNOWLEDGE)
    tagged = frame[:12] + b"\x81\x00\x60\x05" + frame[12:] + b"\0" * 8   # 802.1Q PCP 3, VLAN 5, padded
    pkt = decode(tagged)
    assert pkt.opcode == Opcode.ACKNOWLEDGE and pkt.msn == FIELDS.msn and pkt.icrc_ok


def test_ipv4_options_are_covered_by_the_icrc():
    from scapy.layers.inet import IP, IPOption_Router_Alert

    pkt = Ether(scapy_frame(FLOW, Opcode.SEND_ONLY, psn=3, payload=b"abcd"))
    pkt[IP].options = [IPOption_Router_Alert()]
    del pkt[IP].ihl, pkt[IP].len, pkt[IP].chksum, pkt[BTH].icrc
    frame = bytes(pkt)
    assert frame[14] == 0x46
    decoded = decode(frame)
    assert decoded.icrc_ok and bytes(decoded.payload) == b"abcd"


def test_payload_is_a_zero_copy_view():
    frame = _valid(Opcode.RDMA_WRITE_MIDDLE, b"x" * 40)
    assert decode(frame).payload.obj is frame


def _set(frame: bytes, offset: int, data: bytes) -> bytes:
    return frame[:offset] + data + frame[offset + len(data):]


def _fix_ip_checksum(frame: bytes) -> bytes:
    hdr = bytearray(frame[14:34])
    hdr[10:12] = b"\0\0"
    s = sum(struct.unpack(">10H", hdr))
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return _set(frame, 24, struct.pack(">H", ~s & 0xFFFF))


@pytest.mark.parametrize(
    "mutate,error,offset,words",
    [
        (lambda f: f[:10], TruncatedFrameError, 10, "Ethernet header"),
        (lambda f: f[:30], TruncatedFrameError, 30, "IPv4 header"),
        (lambda f: f[:-3], TruncatedFrameError, None, "IPv4 packet"),
        (lambda f: _set(f, 12, b"\x08\x06"), NotRoceError, 12, "EtherType 0x0806"),
        (lambda f: _fix_ip_checksum(_set(f, 23, b"\x06")), NotRoceError, 23, "not UDP"),
        (lambda f: _set(f, 36, b"\x00\x35"), NotRoceError, 36, "port 53"),
        (lambda f: _fix_ip_checksum(_set(f, 20, b"\x20\x10")), NotRoceError, 20, "fragment"),
        (lambda f: _set(f, 14, b"\x55"), BadVersionError, 14, "IP version 5"),
        (lambda f: _set(f, BTH_AT + 1, b"\x01"), BadVersionError, BTH_AT + 1, "transport version 1"),
        (lambda f: _set(f, BTH_AT, b"\x24"), UnsupportedOpcodeError, BTH_AT, "0x24"),
        (lambda f: _set(f, 38, b"\x00\x10"), BadLengthError, 38, "UDP length 16"),
        (lambda f: _set(f, 24, b"\x00\x00"), IpChecksumError, 24, "checksum"),
    ],
    ids=["eth", "ip-hdr", "ip-len", "arp", "tcp", "port", "fragment", "ipver", "tver", "uc-opcode", "udp-len",
         "ip-csum"],
)
def test_bad_frames_raise_typed_errors(mutate, error, offset, words):
    frame = mutate(_valid())
    with pytest.raises(error) as exc:
        decode(frame)
    assert isinstance(exc.value, RoceFormatError) and exc.value.is_user_error
    assert words in str(exc.value) and "at byte offset" in str(exc.value)
    if offset is not None:
        assert exc.value.offset == offset


def test_payload_on_ack_is_a_length_error():
    # A SEND_ONLY carrying 4 bytes relabelled as a READ request: too short for its 16-byte RETH.
    four = scapy_frame(FLOW, Opcode.SEND_ONLY, psn=1, payload=b"abcd")
    with pytest.raises(TruncatedFrameError, match="extended headers"):
        decode(_set(four, BTH_AT, bytes([Opcode.RDMA_READ_REQUEST])), check_icrc=False)
    # Relabel a SEND_ONLY with 8 bytes of payload as an ACK: AETH(4) then 4 stray bytes.
    eight = scapy_frame(FLOW, Opcode.SEND_ONLY, psn=1, payload=b"abcdefgh")
    with pytest.raises(BadLengthError, match="carries no payload"):
        decode(_set(eight, BTH_AT, bytes([Opcode.ACKNOWLEDGE])), check_icrc=False)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_roce_format_errors(data):
    try:
        decode(data)
    except RoceFormatError:
        pass


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(list(LAYOUTS)), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4),
       st.integers(0, 200), st.booleans(), st.booleans())
def test_garbled_valid_frames_only_raise_roce_format_errors(opcode, edits, cut, tagged, ipv6):
    payload = b"hello world" if LAYOUTS[opcode].has_payload else b""
    frame = bytearray((TPL6 if ipv6 else TPL)[opcode].build(0x00ABCD, payload, ext=FIELDS))
    if tagged:
        frame[12:12] = b"\x81\x00\x00\x07"
    for offset, value in edits:
        if offset < len(frame):
            frame[offset] = value
    del frame[len(frame) - min(cut, len(frame)) if cut % 3 == 0 else len(frame):]
    try:
        pkt = decode(bytes(frame))
    except RoceFormatError:
        return
    assert pkt.icrc_ok   # anything accepted passed every check
