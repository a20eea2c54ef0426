"""Parser constructs: select (masks, ranges, tuples, default), header stacks, verify, lookahead, errors."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.p4.compiler.conftest import SourceSwitch, Switch

pytestmark = pytest.mark.unit

PROGRAM = """
error { BadVersion }
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header sr_t { bit<1> bos; bit<15> port; }
header v_t { bit<4> version; bit<4> len; bit<8> proto; }
header tag_t { bit<8> tag; }
struct metadata { bit<8> peek; bit<8> tags; }
struct headers { eth_t eth; sr_t[4] sr; v_t v; tag_t tag; }

parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.type) {
            0x1234: parse_sr;
            0x0800: parse_v;
            0x8000 &&& 0xF000: parse_tag;
            0x0900 .. 0x09FF: parse_tag;
            default: accept;
        }
    }
    state parse_sr {
        pkt.extract(hdr.sr.next);
        transition select(hdr.sr.last.bos) {
            1: accept;
            default: parse_sr;
        }
    }
    state parse_v {
        meta.peek = pkt.lookahead<bit<8>>();
        pkt.extract(hdr.v);
        verify(hdr.v.version == 4, error.BadVersion);
        transition select(hdr.v.len, hdr.v.proto) {
            (5, 6): accept;
            (_, 17): parse_tag;
            (0 .. 4, _): reject;
        }
    }
    state parse_tag {
        pkt.extract(hdr.tag);
        meta.tags = meta.tags + 1;
        transition accept;
    }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 1;
        if (sm.parser_error == error.StackOutOfBounds) { sm.egress_spec = 9; }
        else if (sm.parser_error == error.PacketTooShort) { sm.egress_spec = 10; }
        else if (sm.parser_error == error.BadVersion) { sm.egress_spec = 11; }
        else if (sm.parser_error == error.NoMatch) { sm.egress_spec = 12; }
        else if (sm.parser_error != error.NoError) { sm.egress_spec = 13; }
        else if (hdr.sr[0].isValid()) {
            sm.egress_spec = (bit<9>) hdr.sr[0].port;
            hdr.sr.pop_front(1);
            if (!hdr.sr[0].isValid()) { hdr.eth.type = 0x0800; }
        }
        if (hdr.tag.isValid()) { hdr.tag.tag = meta.tags + meta.peek; }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) {
    apply { pkt.emit(hdr.eth); pkt.emit(hdr.sr); pkt.emit(hdr.v); pkt.emit(hdr.tag); }
}
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""

ETH = bytes(6) + bytes(5) + b"\x01"


@pytest.fixture(scope="module")
def sw(source_switch: SourceSwitch) -> Switch:
    return source_switch(PROGRAM, name="parser.p4")


def _sr(port: int, bos: bool) -> bytes:
    return ((int(bos) << 15) | port).to_bytes(2, "big")


def test_header_stack_next_last_and_pop_front(sw: Switch) -> None:
    frame = ETH + b"\x12\x34" + _sr(3, False) + _sr(4, False) + _sr(5, True) + b"payload"
    (port, out), = sw.send(1, frame)
    assert port == 3
    assert out == ETH + b"\x12\x34" + _sr(4, False) + _sr(5, True) + b"payload"
    (port, out), = sw.send(1, ETH + b"\x12\x34" + _sr(7, True) + b"pl")
    assert port == 7 and out == ETH + b"\x08\x00" + b"pl"  # last hop: stack empty, etherType rewritten


def test_stack_overflow_is_stack_out_of_bounds(sw: Switch) -> None:
    frame = ETH + b"\x12\x34" + _sr(1, False) * 5 + b"x"
    (port, out), = sw.send(1, frame)
    assert port == 9
    assert out == frame  # four extracted headers are re-emitted, the fifth stays in the payload


def test_truncated_header_is_packet_too_short_and_keeps_bytes(sw: Switch) -> None:
    frame = ETH + b"\x08\x00" + b"\x45"       # v_t needs 2 bytes
    (port, out), = sw.send(1, frame)
    assert port == 10 and out == frame


def test_verify_and_select_tuples_masks_ranges(sw: Switch) -> None:
    assert sw.send(1, ETH + b"\x08\x00" + b"\x65\x06")[0][0] == 11          # version 6 -> BadVersion
    assert sw.send(1, ETH + b"\x08\x00" + b"\x45\x06")[0][0] == 1           # (5, 6) accept
    (port, out), = sw.send(1, ETH + b"\x08\x00" + b"\x47\x11" + b"\x00")   # (_, 17) -> tag
    assert port == 1 and out[-1] == 1 + 0x47                                # tags + lookahead byte
    # (0..4, _) -> explicit reject: parsing stops, parser_error stays NoError (the packet goes on to ingress)
    assert sw.send(1, ETH + b"\x08\x00" + b"\x43\x01" + b"\x07") == [(1, ETH + b"\x08\x00\x43\x01\x07")]
    assert sw.send(1, ETH + b"\x08\x00" + b"\x49\x01")[0][0] == 12          # no case -> NoMatch
    assert sw.send(1, ETH + b"\x8a\xbc" + b"\x05")[0][1][-1] == 1           # mask 0x8000 &&& 0xF000
    assert sw.send(1, ETH + b"\x09\x42" + b"\x05")[0][1][-1] == 1           # range 0x0900..0x09FF
    assert sw.send(1, ETH + b"\x0a\x00" + b"\x05")[0][1][-1] == 5           # default accept: untouched


def test_ten_thousand_random_and_truncated_frames_never_crash(sw: Switch) -> None:
    rng = random.Random(7)
    types = [b"\x12\x34", b"\x08\x00", b"\x8f\xff", b"\x09\x00", b"\x00\x00"]
    errors_before = sum(sw.pipe.drops.values())
    ports: dict[int, int] = {}
    for i in range(10_000):
        body = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 24)))
        junk = bytes(rng.getrandbits(8) for _ in range(rng.randrange(60)))
        frame = (ETH + rng.choice(types) + body) if i % 3 else junk
        out = sw.send(1, frame)
        for port, _ in out:
            ports[port] = ports.get(port, 0) + 1
    assert sum(ports.values()) + sum(sw.pipe.drops.values()) - errors_before >= 10_000 - 1
    for port in (9, 10, 11, 12):   # every parser error class was hit and reported to ingress
        assert ports.get(port, 0) > 0, ports
    errs = sw.pipe.parser_errors      # ... and counted by name
    assert {"StackOutOfBounds", "PacketTooShort", "BadVersion", "NoMatch"} <= set(errs)
    assert errs["PacketTooShort"] >= ports[10]


VARBIT_PROGRAM = """
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> tos; bit<16> len; bit<16> id; bit<16> frag; bit<8> ttl; bit<8> proto;
    bit<16> csum; bit<32> src; bit<32> dst;
    varbit<320> options;
}
header l4_t { bit<16> sport; bit<16> dport; }
struct headers { ipv4_t ipv4; l4_t l4; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.ipv4, (bit<32>) (((bit<16>) pkt.lookahead<bit<8>>()[3:0] - 5) * 32));
        pkt.extract(hdr.l4);
        transition accept;
    }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = 2;
        hdr.l4.dport = hdr.l4.dport + 1;
        if (sm.parser_error == error.HeaderTooShort) { sm.egress_spec = 3; }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.ipv4); pkt.emit(hdr.l4); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_varbit_ipv4_options_round_trip(source_switch: SourceSwitch) -> None:
    sw = source_switch(VARBIT_PROGRAM)
    for ihl in (5, 6, 15):
        opts = bytes(range(1, 1 + 4 * (ihl - 5)))
        ip = bytes([0x40 | ihl]) + bytes(19) + opts
        (port, out), = sw.send(1, ip + b"\x00\x07\x00\x09" + b"data")
        assert port == 2 and out == ip + b"\x00\x07\x00\x0a" + b"data"
    (port, out), = sw.send(1, bytes([0x44]) + bytes(30))       # ihl 4: length wraps -> above varbit<320>
    assert port == 3 and out == bytes([0x44]) + bytes(30)


UNION_PROGRAM = """
header a_t { bit<8> tag; bit<8> a; }
header b_t { bit<8> tag; bit<16> b; }
header_union ab_t { a_t a; b_t b; }
header sel_t { bit<8> which; }
struct headers { sel_t sel; ab_t u; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.sel);
        transition select(hdr.sel.which) { 1: pa; 2: pb; default: accept; }
    }
    state pa { pkt.extract(hdr.u.a); transition accept; }
    state pb { pkt.extract(hdr.u.b); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = hdr.u.isValid() ? 9w1 : 9w2;
        if (hdr.u.a.isValid() && hdr.u.a.tag == 0xEE) {
            hdr.u.b.setValid();            // switches the union to member b: a becomes invalid
            hdr.u.b.tag = 0xBB;
            hdr.u.b.b = 0x1234;
        }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.sel); pkt.emit(hdr.u); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_header_union_one_valid_member(source_switch: SourceSwitch) -> None:
    sw = source_switch(UNION_PROGRAM)
    assert sw.send(0, b"\x01\x11\x22rest") == [(1, b"\x01\x11\x22rest")]
    assert sw.send(0, b"\x02\x11\x22\x33rest") == [(1, b"\x02\x11\x22\x33rest")]
    assert sw.send(0, b"\x03rest") == [(2, b"\x03rest")]
    assert sw.send(0, b"\x01\xee\x22rest") == [(1, b"\x01\xbb\x12\x34rest")]   # a replaced by b


PVS_PROGRAM = """
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
header tag_t { bit<8> v; }
struct headers { eth_t eth; tag_t tag; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    value_set<bit<16>>(4) tagged_types;
    state start {
        pkt.extract(hdr.eth);
        transition select(hdr.eth.type) {
            tagged_types: parse_tag;
            default: accept;
        }
    }
    state parse_tag { pkt.extract(hdr.tag); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { sm.egress_spec = hdr.tag.isValid() ? 9w1 : 9w2; }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.eth); pkt.emit(hdr.tag); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_parser_value_set_filled_by_the_control_plane(source_switch: SourceSwitch) -> None:
    sw = source_switch(PVS_PROGRAM)
    frame = ETH + b"\x88\xb5" + b"\x07rest"
    assert sw.send(1, frame)[0][0] == 2
    sw.cmd("pvs_add P.tagged_types 0x88b5")
    assert sw.send(1, frame)[0][0] == 1
    sw.cmd("pvs_add tagged_types 0x9000&&&0xf000")
    assert sw.send(1, ETH + b"\x9a\xbc" + b"\x07rest")[0][0] == 1
    assert sw.cmd("pvs_get tagged_types") == ["0x88b5&&&0xffff\n0x9000&&&0xf000"]
    sw.cmd("pvs_remove tagged_types 0x88b5", "pvs_clear tagged_types")
    assert sw.send(1, frame)[0][0] == 2
