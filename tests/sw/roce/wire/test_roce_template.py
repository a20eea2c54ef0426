"""Fast template vs Scapy: byte-identical frames for every opcode and random fields (property test)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sw.roce import Flow, FlowTemplates, Opcode, decode, scapy_frame, udp_sport
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.flow import ECN_ECT0, flow_label
from sw.roce.wire.opcodes import LAYOUTS

pytestmark = pytest.mark.unit

FLOWS = {
    4: Flow("02:11:22:33:44:55", "02:66:77:88:99:aa", "192.168.7.1", "192.168.9.2", 0x000123, 0xABCDEF,
            pkey=0x8001, dscp=26, ttl=17),
    6: Flow("02:11:22:33:44:55", "02:66:77:88:99:aa", "2001:db8::1", "2001:db8:ffff::2", 0x000123, 0xABCDEF,
            pkey=0x8001, dscp=26, ttl=17),
}
TEMPLATES = {v: FlowTemplates(f) for v, f in FLOWS.items()}

u8, u24 = st.integers(0, 0xFF), st.integers(0, 0xFFFFFF)
u32, u64 = st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFFFFFFFFFF)


@st.composite
def packets(draw):
    opcode = draw(st.sampled_from(list(LAYOUTS)))
    payload = draw(st.binary(max_size=300)) if LAYOUTS[opcode].has_payload else b""
    ext = HeaderFields(va=draw(u64), rkey=draw(u32), dma_len=draw(u32), immdt=draw(u32), syndrome=draw(u8),
                       msn=draw(u24), swapdt=draw(u64), cmpdt=draw(u64), orig_rem_dt=draw(u64))
    fields = dict(psn=draw(u24), payload=payload, ecn=draw(st.integers(0, 3)), ackreq=draw(st.booleans()),
                  se=draw(st.booleans()), dqpn=draw(st.none() | u24), ext=ext)
    return draw(st.sampled_from([4, 6])), opcode, fields


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packets())
def test_template_is_byte_identical_to_scapy(case):
    version, opcode, fields = case
    fast = TEMPLATES[version][opcode].build(**fields)
    assert fast == scapy_frame(FLOWS[version], opcode, **fields)
    pkt = decode(fast)   # and our decoder reads back what was written
    assert (pkt.opcode, pkt.psn, pkt.ecn, pkt.ackreq, pkt.se) == (
        opcode, fields["psn"], fields["ecn"], fields["ackreq"], fields["se"])
    assert pkt.dest_qp == (FLOWS[version].dst_qpn if fields["dqpn"] is None else fields["dqpn"])
    assert bytes(pkt.payload) == fields["payload"] and pkt.icrc_ok


@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("opcode", list(LAYOUTS), ids=lambda op: op.name)
def test_every_opcode_and_pad_length(version: int, opcode: Opcode):
    sizes = (0, 1, 2, 3, 4, 1024) if LAYOUTS[opcode].has_payload else (0,)
    for n in sizes:
        payload = bytes((i * 7) & 0xFF for i in range(n))
        assert TEMPLATES[version][opcode].build(5, payload) == scapy_frame(FLOWS[version], opcode, psn=5,
                                                                          payload=payload)


def test_memoryview_payload_is_accepted():
    payload = bytearray(b"0123456789")
    tpl = TEMPLATES[4][Opcode.SEND_ONLY]
    assert tpl.build(1, memoryview(payload)) == tpl.build(1, bytes(payload))


@pytest.mark.parametrize("bad", [dict(psn=1 << 24), dict(psn=-1), dict(psn=0, dqpn=1 << 24), dict(psn=0, ecn=4)])
def test_out_of_range_fields_are_rejected(bad):
    with pytest.raises(ValueError):
        TEMPLATES[4][Opcode.SEND_ONLY].build(**bad)


@pytest.mark.parametrize("version", [4, 6])
@pytest.mark.parametrize("bad", [HeaderFields(va=1 << 64), HeaderFields(rkey=-1), HeaderFields(dma_len=1 << 32)])
def test_out_of_range_header_fields_are_value_errors(version, bad):
    with pytest.raises(ValueError, match="RDMA_WRITE_ONLY"):
        TEMPLATES[version][Opcode.RDMA_WRITE_ONLY].build(0, b"x", ext=bad)
    with pytest.raises(ValueError):
        TEMPLATES[version][Opcode.ACKNOWLEDGE].build(0, ext=HeaderFields(msn=1 << 24))


def test_payload_on_a_header_only_opcode_is_rejected():
    with pytest.raises(ValueError, match="no payload"):
        TEMPLATES[4][Opcode.ACKNOWLEDGE].build(0, b"x")


def test_data_is_ect0_and_cnp_uses_its_own_class():
    data = decode(TEMPLATES[4][Opcode.RDMA_WRITE_FIRST].build(0, b"abcd"))
    cnp = decode(TEMPLATES[4][Opcode.CNP].build(0))
    assert (data.ecn, data.dscp) == (ECN_ECT0, 26)
    assert (cnp.ecn, cnp.dscp, cnp.becn) == (ECN_ECT0, 48, True)


@given(u24, u24)
def test_udp_sport_is_in_the_roce_range_and_symmetric(lqpn, rqpn):
    port = udp_sport(lqpn, rqpn)
    assert 0xC000 <= port <= 0xFFFF
    assert port == udp_sport(rqpn, lqpn)
    assert 0 <= flow_label(lqpn, rqpn) <= 0xFFFFF


def test_udp_sport_known_values_and_spread():
    # Worked by hand from the documented fold: 0x11 * 0x22 = 0x242 -> flow label 0x242 -> 0xC242.
    assert udp_sport(0x11, 0x22) == 0xC242
    ports = {udp_sport(0x100 + i, 0x5000 + 3 * i) for i in range(1000)}
    assert len(ports) > 900          # ECMP entropy: distinct QP pairs land on distinct ports
    assert FLOWS[4].udp_sport == udp_sport(0x123, 0xABCDEF)
    assert FLOWS[4].reversed().udp_sport == FLOWS[4].udp_sport
