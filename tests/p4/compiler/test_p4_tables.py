"""Tables: match kinds, priorities, const entries, defaults, hit/miss/action_run, and CLI table commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from p4.errors import CommandError, CompileError

if TYPE_CHECKING:
    from tests.p4.compiler.conftest import SourceSwitch, Switch

pytestmark = pytest.mark.unit

PROGRAM = """
header h_t { bit<8> k1; bit<16> k2; bit<8> res; bit<8> flags; bit<8> tern; }
struct headers { h_t h; }
struct metadata { bit<8> m; }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action set_out(bit<8> v) { hdr.h.res = v; }
    action set_flag(bit<8> f) { hdr.h.flags = hdr.h.flags | f; }
    action nop() { }
    action set_tern(bit<8> v) { hdr.h.tern = v; }
    @defaultonly action only_default() { hdr.h.res = 0xdd; }
    table t_ternary {
        key = { hdr.h.k1: ternary; hdr.h.k2: range; }
        actions = { set_tern; nop; }
        default_action = nop();
    }
    table t_optional {
        key = { hdr.h.k1: optional; hdr.h.k2: exact; }
        actions = { set_flag; nop; }
        default_action = nop();
    }
    table t_const {
        key = { hdr.h.k1: ternary; }
        actions = { set_flag; nop; }
        const default_action = set_flag(0x80);
        const entries = {
            0x10 &&& 0xF0 : set_flag(0x01);
            0x11 : set_flag(0x02);
            _ : set_flag(0x04);
        }
    }
    table t_exact {
        key = { hdr.h.k1: exact; }
        actions = { set_out; only_default; }
        default_action = only_default();
    }
    apply {
        sm.egress_spec = 1;
        t_ternary.apply();
        t_optional.apply();
        if (t_const.apply().hit) {
            hdr.h.flags = hdr.h.flags | 0x40;
        }
        switch (t_exact.apply().action_run) {
            set_out: { hdr.h.flags = hdr.h.flags | 0x20; }
            default: { hdr.h.flags = hdr.h.flags | 0x10; exit; }
        }
        hdr.h.flags = hdr.h.flags | 0x08;
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.fixture
def sw(source_switch: SourceSwitch) -> Switch:
    return source_switch(PROGRAM)


def _run(sw: Switch, k1: int, k2: int) -> tuple[int, int]:
    out = sw.send(0, bytes([k1]) + k2.to_bytes(2, "big") + b"\0\0\0" + b"\0" * 40)
    frame = out[0][1]
    return frame[3], frame[4], frame[5]


def test_ternary_and_range_lowest_priority_value_wins(sw: Switch) -> None:
    sw.cmd("table_add t_ternary set_tern 0x00&&&0x00 0->65535 => 1 100",
           "table_add t_ternary set_tern 0x20&&&0xF0 100->200 => 2 10",
           "table_add t_ternary set_tern 0x21&&&0xFF 150->150 => 3 5")
    assert _run(sw, 0x21, 150)[2] == 3
    assert _run(sw, 0x21, 151)[2] == 2
    assert _run(sw, 0x2F, 100)[2] == 2
    assert _run(sw, 0x2F, 99)[2] == 1
    assert _run(sw, 0x31, 150)[2] == 1


def test_optional_wildcard_and_exact(sw: Switch) -> None:
    sw.cmd("table_add t_optional set_flag * 7 => 0x01 2")
    assert _run(sw, 0x99, 7)[1] & 0x01
    assert not _run(sw, 0x99, 8)[1] & 0x01


def test_const_entries_in_order_hit_flag_and_switch_action_run(sw: Switch) -> None:
    _, flags, _ = _run(sw, 0x11, 0)
    # 0x11 matches 0x10&&&0xF0 first (const entries: first wins); hit sets 0x40; t_exact misses ->
    # default only_default -> switch default: 0x10 then exit (0x08 never set)
    assert flags == 0x01 | 0x40 | 0x10
    sw.cmd("table_add t_exact set_out 0x33 => 0x77")
    out, flags, _ = _run(sw, 0x33, 0)
    assert out == 0x77 and flags == 0x04 | 0x40 | 0x20 | 0x08


def test_cli_errors_are_clear(sw: Switch) -> None:
    with pytest.raises(CommandError, match="has const entries"):
        sw.cmd("table_add t_const set_flag 0x1&&&0xff => 1 1")
    with pytest.raises(CommandError, match="const default_action"):
        sw.cmd("table_set_default t_const nop")
    with pytest.raises(CommandError, match="is @defaultonly"):
        sw.cmd("table_add t_exact only_default 0x1 =>")
    with pytest.raises(CommandError, match="give a priority"):
        sw.cmd("table_add t_ternary set_tern 0x1&&&0xff 1->2 => 1")
    with pytest.raises(CommandError, match="takes 1 data values"):
        sw.cmd("table_add t_exact set_out 0x1 => 1 2")
    with pytest.raises(CommandError, match="does not fit in 8 bits"):
        sw.cmd("table_add t_exact set_out 0x100 => 1")
    with pytest.raises(CommandError, match="unknown table 'nope'"):
        sw.cmd("table_add nope set_out 1 => 1")
    with pytest.raises(CommandError, match="unknown command 'tabel_add'"):
        sw.cmd("tabel_add t_exact set_out 1 => 1")


def test_cli_modify_delete_dump_and_default(sw: Switch) -> None:
    (msg,) = sw.cmd("table_add t_exact set_out 0x05 => 0x11")
    assert msg == "Entry has been added with handle 0"
    assert _run(sw, 5, 0)[0] == 0x11
    sw.cmd("table_modify t_exact set_out 0 0x12")
    assert _run(sw, 5, 0)[0] == 0x12
    assert sw.cmd("table_num_entries t_exact") == ["1"]
    dump = sw.cmd("table_dump t_exact")[0]
    assert "EXACT     05" in dump and "I.set_out - 12" in dump
    sw.cmd("table_delete t_exact 0")
    assert _run(sw, 5, 0)[0] == 0xDD
    sw.cmd("table_set_default t_exact set_out 0x44")
    assert _run(sw, 5, 0)[0] == 0x44
    sw.cmd("table_reset_default t_exact")
    assert _run(sw, 5, 0)[0] == 0xDD
    with pytest.raises(CommandError, match="no entry with handle 0"):
        sw.cmd("table_delete t_exact 0")


def test_cli_completions_and_help(sw: Switch) -> None:
    assert "table_add" in sw.cli.completions("table_a")
    assert sw.cli.completions("table_add I.t_e") == ["I.t_exact"]
    assert sw.cli.completions("table_add I.t_exact ") == ["I.only_default", "I.set_out"]
    assert sw.cmd("help table_add") == ["table_add TABLE ACTION MATCH... => DATA... [PRIORITY]"]


SELECTOR = """
header h_t { bit<8> k; bit<16> flow; bit<8> res; }
struct headers { h_t h; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action set_port(bit<9> port) { sm.egress_spec = port; }
    table ecmp {
        key = { hdr.h.k: exact; hdr.h.flow: selector; }
        actions = { set_port; NoAction; }
        implementation = action_selector(HashAlgorithm.crc16, 32w64, 32w14);
        default_action = NoAction();
    }
    apply { sm.egress_spec = 9; ecmp.apply(); }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_action_selector_groups_and_members(source_switch: SourceSwitch) -> None:
    from p4 import algorithms

    sw = source_switch(SELECTOR)
    prof = "I.ecmp_profile"
    members = [int(sw.cmd(f"act_prof_create_member {prof} set_port {p}")[0].split()[-1]) for p in (2, 3, 4)]
    grp = int(sw.cmd(f"act_prof_create_group {prof}")[0].split()[-1])
    for m in members:
        sw.cmd(f"act_prof_add_member_to_group {prof} {m} {grp}")
    sw.cmd(f"table_indirect_add_with_group ecmp 1 => {grp}", f"table_indirect_add ecmp 2 => {members[2]}")
    seen = set()
    for flow in range(60):
        (port, _), = sw.send(0, bytes([1]) + flow.to_bytes(2, "big") + b"\0")
        h = algorithms.crc16(flow.to_bytes(2, "big")) & 0x3FFF
        assert port == 2 + h % 3
        seen.add(port)
    assert seen == {2, 3, 4}
    assert sw.send(0, b"\x02\x00\x07\x00")[0][0] == 4      # entry pointing at one member
    assert sw.send(0, b"\x03\x00\x07\x00")[0][0] == 9      # miss: default NoAction
    with pytest.raises(CommandError, match="still in use"):
        sw.cmd(f"act_prof_delete_member {prof} {members[2]}")


def test_random_malformed_commands_only_raise_command_errors(sw: Switch) -> None:
    import random

    from p4.runtime_cli import COMMANDS_HELP

    rng = random.Random(3)
    words = ["t_exact", "I.t_ternary", "set_out", "set_tern", "=>", "0x1", "1->2", "3&&&0xf", "10.0.0.1/8",
             "-1", "zz", "99999999999", "reg", "cnt", "dcnt", "mtr", "1:2", "0.5:3", "", "*"]
    for _ in range(400):
        line = " ".join([rng.choice(list(COMMANDS_HELP))] + [rng.choice(words) for _ in range(rng.randrange(6))])
        try:
            sw.cli.execute(line)
        except CommandError as exc:
            assert "failed (" not in str(exc), (line, str(exc))   # no unexpected exception inside
    assert sw.send(0, b"\x05\x00\x00\x00\x00\x00" + bytes(40))  # the switch still forwards


def test_name_annotations_set_control_plane_names(source_switch: SourceSwitch) -> None:
    sw = source_switch(PROGRAM.replace("    table t_exact {", '    @name("exact_tbl") table t_exact {')
                       .replace("    action set_out(bit<8> v)", '    @name(".global_set") action set_out(bit<8> v)'))
    assert "I.exact_tbl" in sw.prog.tables and "global_set" in sw.prog.actions
    sw.cmd("table_add I.exact_tbl global_set 0x05 => 0x11")
    assert _run(sw, 5, 0)[0] == 0x11


PRIORITY_PROGRAM = """
header h_t { bit<8> k; bit<8> res; }
struct headers { h_t h; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    action set(bit<8> v) { hdr.h.res = v; }
    table t_prio {
        key = { hdr.h.k: ternary; }
        actions = { set; }
        const entries = {
            _ : set(1) @priority(30);
            0x10 &&& 0xF0 : set(2) @priority(20);
            0x11 : set(3) @priority(25);
            0x12 : set(4);
            0x12 &&& 0xFE : set(5) @priority(10);
        }
    }
    apply { sm.egress_spec = 1; t_prio.apply(); }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


@pytest.mark.parametrize(("k", "res"), [(0x11, 2), (0x13, 5), (0x12, 5), (0x15, 2), (0x99, 1)])
def test_const_entries_at_priority_smallest_number_wins(source_switch: SourceSwitch, k: int, res: int) -> None:
    """``@priority(n)`` on const entries: the smallest number wins an overlap whatever the order (0x11's own
    entry at 25 loses to 0x10&&&0xF0 at 20); an entry without one gets the previous entry's plus one (0x12 at 26
    loses to 0x12&&&0xFE at 10)."""
    out = source_switch(PRIORITY_PROGRAM).send(0, bytes([k, 0]) + b"\0" * 40)
    assert out[0][1][1] == res


def test_const_entry_priority_must_be_an_integer(source_switch: SourceSwitch) -> None:
    bad = PRIORITY_PROGRAM.replace("@priority(10)", '@priority("x")')
    with pytest.raises(CompileError, match="@priority of an entry of .*t_prio takes one integer"):
        source_switch(bad)
