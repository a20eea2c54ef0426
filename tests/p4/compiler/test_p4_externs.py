"""v1model externs and packet paths: registers, counters, meters, hash, digest, clone, resubmit, recirculate."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from p4 import algorithms
from p4.program import PKT_EGRESS_CLONE, PKT_RECIRC, PKT_RESUBMIT

if TYPE_CHECKING:
    from pathlib import Path

    from tests.p4.compiler.conftest import ProgramSwitch, SourceSwitch, Switch

pytestmark = pytest.mark.unit

PROGRAM = """
header cmd_t { bit<8> op; bit<8> arg; bit<32> r32; bit<16> r16; bit<8> itype; bit<8> color; }
struct learn_t { bit<8> op; bit<9> port; }
struct metadata {
    @field_list(1) bit<8> kept;
    bit<8> lost;
    @field_list(2) bit<8> loops;
}
struct headers { cmd_t c; }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.c); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    register<bit<32>>(8) reg;
    counter(8, CounterType.packets_and_bytes) cnt;
    direct_counter(CounterType.packets) dcnt;
    meter(4, MeterType.packets) mtr;
    action hit() { }
    table t {
        key = { hdr.c.arg: exact; }
        actions = { hit; NoAction; }
        counters = dcnt;
        default_action = NoAction();
    }
    apply {
        sm.egress_spec = 2;
        hdr.c.itype = (bit<8>) sm.instance_type;
        cnt.count((bit<32>) hdr.c.arg);
        t.apply();
        if (hdr.c.op == 1) {            // register read-modify-write
            bit<32> v;
            reg.read(v, (bit<32>) hdr.c.arg);
            v = v + 1;
            reg.write((bit<32>) hdr.c.arg, v);
            hdr.c.r32 = v;
        } else if (hdr.c.op == 2) {     // hashes
            hash(hdr.c.r32, HashAlgorithm.crc32, 32w0, { hdr.c.op, hdr.c.arg }, 32w0xffffffff);
            hash(hdr.c.r16, HashAlgorithm.csum16, 16w0, { hdr.c.op, hdr.c.arg }, 17w0x10000);
        } else if (hdr.c.op == 3) {     // digest to the control plane
            digest<learn_t>(1, { hdr.c.arg, sm.ingress_port });
        } else if (hdr.c.op == 4) {     // I2E clone to mirror session 5
            meta.kept = 0x11;
            meta.lost = 0x22;
            clone_preserving_field_list(CloneType.I2E, 5, 1);
            hdr.c.arg = 0x99;
        } else if (hdr.c.op == 5) {     // resubmit once
            if (sm.instance_type == 0) {
                meta.kept = 0x33;
                resubmit_preserving_field_list(1);
            } else {
                hdr.c.arg = meta.kept;
            }
        } else if (hdr.c.op == 7) {
            mtr.execute_meter((bit<32>) 0, hdr.c.color);
        } else if (hdr.c.op == 8) {
            bit<8> r;
            random(r, 8w10, 8w20);
            hdr.c.arg = r;
        }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        if (hdr.c.op == 6 && sm.instance_type == 0) {  // E2E clone + recirculate (twice)
            clone(CloneType.E2E, 5);
        }
        if (hdr.c.op == 9 && meta.loops < 2) {
            meta.loops = meta.loops + 1;
            hdr.c.arg = hdr.c.arg + 1;
            recirculate_preserving_field_list(2);
        }
        if (sm.instance_type == 1) { hdr.c.r16 = meta.kept ++ meta.lost; }
        if (hdr.c.op == 10) { truncate(3); }
    }
}
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.c); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.fixture
def sw(source_switch: SourceSwitch) -> Switch:
    return source_switch(PROGRAM)


def frame(op: int, arg: int = 0) -> bytes:
    return bytes([op, arg]) + bytes(8) + b"tail"   # cmd_t is 10 bytes: op arg r32 r16 itype color


def test_register_counter_and_direct_counter(sw: Switch) -> None:
    sw.cmd("table_add t hit 3 =>")
    for expect in (1, 2, 3):
        (port, out), = sw.send(1, frame(1, 3))
        assert port == 2 and int.from_bytes(out[2:6], "big") == expect
    assert sw.cmd("register_read reg 3") == ["I.reg[3]= 3"]
    sw.cmd("register_write reg 3 41")
    assert int.from_bytes(sw.send(1, frame(1, 3))[0][1][2:6], "big") == 42
    assert sw.cmd("counter_read cnt 3") == ["I.cnt[3]=  BmCounterValue(packets=4, bytes=56)"]
    assert sw.cmd("counter_read dcnt 0") == ["I.dcnt[0]=  BmCounterValue(packets=4, bytes=56)"]
    sw.cmd("counter_reset cnt", "register_reset reg")
    assert sw.cmd("counter_read cnt 3")[0].endswith("(packets=0, bytes=0)")
    assert sw.cmd("register_read reg 3") == ["I.reg[3]= 0"]


def test_hash_algorithms_match_reference(sw: Switch) -> None:
    out = sw.send(1, frame(2, 0x5A))[0][1]
    assert int.from_bytes(out[2:6], "big") == algorithms.crc32(bytes([2, 0x5A]))
    assert int.from_bytes(out[6:8], "big") == algorithms.csum16(bytes([2, 0x5A]))
    assert algorithms.crc16(b"123456789") == 0xBB3D and algorithms.crc32(b"123456789") == 0xCBF43926


def test_digest_reaches_the_caller(sw: Switch) -> None:
    sw.send(7, frame(3, 0x42))
    (d,) = sw.last.digests
    assert (d.receiver, d.name, d.fields) == (1, "learn_t", {"op": 0x42, "port": 7})


def test_i2e_clone_gets_original_packet_and_field_list(sw: Switch) -> None:
    sw.cmd("mirroring_add 5 9")
    out = sw.send(1, frame(4, 0x01))
    assert [p for p, _ in out] == [9, 2]      # clone is enqueued before the original (BMv2 order)
    clone, orig = out[0][1], out[1][1]
    assert orig[1] == 0x99 and orig[8] == 0    # original: modified by ingress (instance_type 0)
    assert clone[1] == 0x01 and clone[8] == 0  # clone: the frame as received, re-parsed
    assert int.from_bytes(clone[6:8], "big") == 0x1100  # egress saw instance_type 1; kept (field list 1)
    assert int.from_bytes(orig[6:8], "big") == 0        # survived, lost was reset


def test_resubmit_runs_ingress_again_with_preserved_fields(sw: Switch) -> None:
    (port, out), = sw.send(1, frame(5, 0))
    assert port == 2 and out[1] == 0x33 and out[8] == PKT_RESUBMIT


def test_e2e_clone_and_recirculate(sw: Switch) -> None:
    sw.cmd("mirroring_add 5 4")
    out = sw.send(1, frame(6, 0))
    assert sorted(p for p, _ in out) == [2, 4]
    (port, out), = sw.send(1, frame(9, 10))
    assert port == 2 and out[1] == 12 and out[8] == PKT_RECIRC   # two passes through egress
    assert PKT_EGRESS_CLONE == 2


def test_meter_colors_and_truncate_and_random(sw: Switch) -> None:
    sw.cmd("meter_array_set_rates mtr 0.000001:1 0.000001:2")   # ~1 packet per second committed
    colors = [sw.send(1, frame(7))[0][1][9] for _ in range(4)]
    assert colors == [0, 1, 2, 2]            # green, yellow (peak bucket), then red
    sw.clock.advance_ns(3_000_000_000)      # buckets refill
    assert sw.send(1, frame(7))[0][1][9] == 0
    assert sw.send(1, frame(10)) == [(2, bytes([10, 0, 0]))]
    vals = {sw.send(1, frame(8))[0][1][1] for _ in range(200)}
    assert vals <= set(range(10, 21)) and len(vals) > 5


def test_verify_checksum_sets_checksum_error_without_dropping(program_switch: ProgramSwitch, tmp_path: Path) -> None:
    from pathlib import Path

    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import raw

    src = (Path(__file__).resolve().parents[3] / "p4" / "programs" / "basic.p4").read_text()
    fields = ("{ hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.totalLen, hdr.ipv4.identification, "
              "hdr.ipv4.flags, hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.srcAddr, "
              "hdr.ipv4.dstAddr }")
    src = src.replace("control MyVerifyChecksum(inout headers hdr, inout metadata meta) {\n    apply { }",
                      "control MyVerifyChecksum(inout headers hdr, inout metadata meta) {\n    apply { "
                      f"verify_checksum(hdr.ipv4.isValid(), {fields}, hdr.ipv4.hdrChecksum, HashAlgorithm.csum16); }}")
    src = src.replace("            ipv4_lpm.apply();", "            ipv4_lpm.apply();\n"
                      "            if (standard_metadata.checksum_error == 1) { standard_metadata.egress_spec = 7; }")
    path = Path(tmp_path) / "verify.p4"
    path.write_text(src)
    sw = program_switch(path)
    sw.cmd("table_add ipv4_lpm ipv4_forward 10.0.0.0/8 => 00:00:00:00:00:02 2")
    good = raw(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP())
    bad = bytearray(good)
    bad[24] ^= 0xFF                           # corrupt the IPv4 header checksum
    assert sw.send(1, good)[0][0] == 2
    (port, out), = sw.send(1, bytes(bad))
    assert port == 7                          # not dropped: ingress saw checksum_error = 1
    fixed = IP(out[14:])
    del fixed.chksum
    assert IP(raw(fixed)).chksum == IP(out[14:]).chksum   # ... and compute_checksum wrote a correct one


MORE = """
header h_t { bit<8> k; bit<8> color; bit<16> x16; bit<32> id32; }
struct headers { h_t h; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control Sub(inout h_t h) {
    action mark(bit<8> c) { h.color = c; }
    table tag { key = { h.k: exact; } actions = { mark; NoAction; } default_action = NoAction(); }
    apply { tag.apply(); }
}
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    direct_meter<bit<8>>(MeterType.packets) dm;
    Sub() first;
    Sub() second;
    action metered() { dm.read(hdr.h.color); }
    table t {
        key = { hdr.h.k: exact; }
        actions = { metered; NoAction; }
        meters = dm;
        default_action = NoAction();
    }
    apply {
        sm.egress_spec = 1;
        if (hdr.h.k == 1) { t.apply(); }
        if (hdr.h.k == 2) { first.apply(hdr.h); }
        if (hdr.h.k == 3) { second.apply(hdr.h); }
        if (hdr.h.k == 4) {
            hash(hdr.h.x16, HashAlgorithm.xor16, 16w0, { 16w0x1234, 16w0xff00 }, 17w65536);
            hash(hdr.h.id32, HashAlgorithm.identity, 32w0, { 8w0xab, 8w0xcd }, 33w0x100000000);
            log_msg("k={} x16={}", { hdr.h.k, hdr.h.x16 });
        }
        if (hdr.h.k == 5) { assert(hdr.h.color == 0); }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_direct_meter_subcontrol_instances_hashes_log_and_assert(source_switch: SourceSwitch) -> None:
    sw = source_switch(MORE)
    (msg,) = sw.cmd("table_add I.t metered 1 =>")
    handle = int(msg.split()[-1])
    sw.cmd(f"meter_set_rates I.dm {handle} 0.000001:1 0.000001:1")
    colors = [sw.send(0, bytes([1, 9]) + bytes(6))[0][1][1] for _ in range(3)]
    assert colors == [0, 2, 2]                # one token, then red (peak bucket empty too)
    sw.cmd("table_add I.first.tag mark 2 => 0x22", "table_add I.second.tag mark 3 => 0x33")
    assert sw.send(0, bytes([2, 0]) + bytes(6))[0][1][1] == 0x22
    assert sw.send(0, bytes([3, 0]) + bytes(6))[0][1][1] == 0x33
    out = sw.send(0, bytes([4, 0]) + bytes(6))[0][1]
    assert int.from_bytes(out[2:4], "big") == 0x1234 ^ 0xFF00
    assert int.from_bytes(out[4:8], "big") == 0xABCD
    assert list(sw.pipe.log)[-1] == ('k={} x16={}', (4, 0x1234 ^ 0xFF00))
    assert sw.send(0, bytes([5, 1]) + bytes(6)) == []                       # assert failed: dropped
    assert any(r.startswith("assert failed at test.p4:") for r in sw.pipe.drops)
