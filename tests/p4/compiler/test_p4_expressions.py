"""Exact bit<N>/int<N> semantics of the generated code, checked against a Python reference model."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

if TYPE_CHECKING:
    from tests.p4.compiler.conftest import SourceSwitch, Switch

pytestmark = pytest.mark.unit

PROGRAM = """
header in_t { bit<8> a; bit<8> b; int<8> sa; int<8> sb; bit<8> sh; }
header out_t {
    bit<8> add; bit<8> sub; bit<8> mul; bit<8> sat_add; bit<8> sat_sub;
    int<8> s_add; int<8> s_sat_add; int<8> s_sat_sub; int<8> s_shr; int<8> s_neg;
    bit<8> shl; bit<8> shr; bit<16> cat; bit<4> slice; bit<8> inv; bit<8> neg;
    bit<32> widen; bit<4> narrow; bit<8> s2u; bit<8> lt; bit<8> cond; bit<8> sliced_set;
    bit<8> div; bit<8> mod; bit<8> bools;
}
struct headers { in_t i; out_t o; }
struct metadata { }
parser P(packet_in pkt, out headers h, inout metadata m, inout standard_metadata_t sm) {
    state start { pkt.extract(h.i); transition accept; }
}
control VC(inout headers h, inout metadata m) { apply { } }
control I(inout headers h, inout metadata m, inout standard_metadata_t sm) {
    apply {
        h.o.setValid();
        h.o.add = h.i.a + h.i.b;
        h.o.sub = h.i.a - h.i.b;
        h.o.mul = h.i.a * h.i.b;
        h.o.sat_add = h.i.a |+| h.i.b;
        h.o.sat_sub = h.i.a |-| h.i.b;
        h.o.s_add = h.i.sa + h.i.sb;
        h.o.s_sat_add = h.i.sa |+| h.i.sb;
        h.o.s_sat_sub = h.i.sa |-| h.i.sb;
        h.o.s_shr = h.i.sa >> h.i.sh;
        h.o.s_neg = -h.i.sa;
        h.o.shl = h.i.a << h.i.sh;
        h.o.shr = h.i.a >> h.i.sh;
        h.o.cat = h.i.a ++ h.i.b;
        h.o.slice = h.i.a[6:3];
        h.o.inv = ~h.i.a;
        h.o.neg = -h.i.a;
        h.o.widen = (bit<32>) h.i.a;
        h.o.narrow = (bit<4>) h.i.a;
        h.o.s2u = (bit<8>) h.i.sa;
        h.o.lt = (h.i.sa < h.i.sb) ? 8w1 : 8w0;
        h.o.cond = h.i.a > h.i.b ? h.i.a : h.i.b;
        h.o.sliced_set = h.i.b;
        h.o.sliced_set[3:0] = h.i.a[7:4];
        h.o.div = h.i.b == 0 ? 8w0 : h.i.a / h.i.b;
        h.o.mod = h.i.b == 0 ? 8w0 : h.i.a % h.i.b;
        bool x = h.i.a == 3 || !(h.i.b != 4) && h.i.a[0:0] == 1;
        h.o.bools = (bit<8>) (bit<1>) x;
        sm.egress_spec = 1;
    }
}
control E(inout headers h, inout metadata m, inout standard_metadata_t sm) { apply { } }
control CC(inout headers h, inout metadata m) { apply { } }
control D(packet_out pkt, in headers h) { apply { pkt.emit(h.i); pkt.emit(h.o); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""

FIELDS = ["add", "sub", "mul", "sat_add", "sat_sub", "s_add", "s_sat_add", "s_sat_sub", "s_shr", "s_neg", "shl",
          "shr", "cat", "slice", "inv", "neg", "widen", "narrow", "s2u", "lt", "cond", "sliced_set", "div", "mod",
          "bools"]
WIDTH = {"cat": 16, "slice": 4, "widen": 32, "narrow": 4}


def _s8(v: int) -> int:
    v &= 0xFF
    return v - 256 if v & 0x80 else v


def reference(a: int, b: int, sa: int, sb: int, sh: int) -> dict[str, int]:
    clamp = lambda v: max(-128, min(127, v))  # noqa: E731
    x = a == 3 or (not (b != 4) and (a & 1) == 1)
    return {
        "add": (a + b) & 0xFF, "sub": (a - b) & 0xFF, "mul": (a * b) & 0xFF, "sat_add": min(255, a + b),
        "sat_sub": max(0, a - b), "s_add": _s8(sa + sb), "s_sat_add": clamp(sa + sb), "s_sat_sub": clamp(sa - sb),
        "s_shr": sa >> sh, "s_neg": _s8(-sa), "shl": (a << sh) & 0xFF if sh < 8 else 0, "shr": a >> sh,
        "cat": (a << 8) | b, "slice": (a >> 3) & 0xF, "inv": a ^ 0xFF, "neg": (-a) & 0xFF, "widen": a,
        "narrow": a & 0xF, "s2u": sa & 0xFF, "lt": int(sa < sb), "cond": max(a, b),
        "sliced_set": (b & 0xF0) | (a >> 4), "div": a // b if b else 0, "mod": a % b if b else 0,
        "bools": int(x),
    }


def decode(out: bytes) -> dict[str, int]:
    bits = int.from_bytes(out[5:], "big")
    total = sum(WIDTH.get(f, 8) for f in FIELDS)
    res = {}
    for f in FIELDS:
        w = WIDTH.get(f, 8)
        total -= w
        v = (bits >> total) & ((1 << w) - 1)
        if f.startswith("s_"):
            v = _s8(v)
        res[f] = v
    return res


@pytest.fixture(scope="module")
def sw(source_switch: SourceSwitch) -> Switch:
    return source_switch(PROGRAM, name="expr.p4")


@settings(max_examples=300, deadline=None)
@given(a=st.integers(0, 255), b=st.integers(0, 255), sa=st.integers(-128, 127), sb=st.integers(-128, 127),
       sh=st.integers(0, 12))
def test_operators_match_reference(sw: Switch, a: int, b: int, sa: int, sb: int, sh: int) -> None:
    frame = bytes([a, b, sa & 0xFF, sb & 0xFF, sh]) + b"\0" * 50
    out = sw.send(0, frame)
    assert len(out) == 1 and out[0][0] == 1
    got = decode(out[0][1][: 5 + sum(WIDTH.get(f, 8) for f in FIELDS) // 8])
    assert got == reference(a, b, sa, sb, sh)
