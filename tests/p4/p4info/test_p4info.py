"""P4Info as p4c writes it: ids by p4c's scheme, names, every section, the three file formats, the CLI flag.

Fixtures (data/): ``action_profile-bmv2.p4`` and its P4Info are p4c's own (p4lang/p4c testdata/p4_16_samples and
p4_16_samples_outputs); ``p4info_features.p4`` is ours.  Ids are recomputed here from the documented scheme
(Jenkins one-at-a-time hash, 8-bit resource prefix, linear probing on the hash), not taken from p4.p4info.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from p4.compiler import compile_file
from p4.errors import P4Error
from p4.p4info import build_p4info, serialize
from p4.p4runtime_proto import json_format, message_class, text_format
from sw.cli import main

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[3]
PROGRAMS = ROOT / "p4" / "programs"
DATA = Path(__file__).resolve().parent / "data"

# P4Ids.Prefix values of p4info.proto (the top byte of every id)
PREFIX = {"action": 0x01, "table": 0x02, "value_set": 0x03, "controller_header": 0x04, "action_profile": 0x11,
          "counter": 0x12, "direct_counter": 0x13, "meter": 0x14, "direct_meter": 0x15, "register": 0x16,
          "digest": 0x17}

# p4c hashes a controller header's type name, not its @controller_header name: published P4Info (e.g. the
# p4runtime-shell sessions and Stratum/PINS tests) gives "packet_in" of type packet_in_header_t the id 81826293,
# and 67146229 in files p4c wrote before it widened the hash to 24 bits (16 bits after 8 zero bits).
PACKET_IN_ID, OLD_SCHEME_PACKET_IN = 81826293, 67146229

# Ids p4c gave in its P4Info of the p4lang/tutorials programs (basic.p4 / the p4runtime exercise; the same
# values p4runtime-shell prints for MyIngress.ipv4_lpm and its actions).
TUTORIAL_IDS = {("table", "MyIngress.ipv4_lpm"): 37375156, ("action", "MyIngress.ipv4_forward"): 28792405,
                ("action", "MyIngress.drop"): 25652968, ("action", "NoAction"): 21257015}


def one_at_a_time(text: str) -> int:
    """Bob Jenkins' one-at-a-time hash, written out here independently of p4.p4info."""
    acc = 0
    mask = (1 << 32) - 1
    for ch in text.encode("ascii"):
        acc = (acc + ch) % (1 << 32)
        acc = (acc + acc * 1024) & mask
        acc = acc ^ (acc // 64)
    acc = (acc + acc * 8) & mask
    acc = acc ^ (acc // 2048)
    return (acc + acc * 32768) & mask


def scheme_id(kind: str, name: str) -> int:
    return PREFIX[kind] * (1 << 24) + one_at_a_time(name) % (1 << 24)


def enum(msg: Any, field: str) -> str:
    """The name of an enum field's value (``EXACT``, ``BOTH``, ``DEFAULT_ONLY``) as p4info.proto spells it."""
    return str(msg.DESCRIPTOR.fields_by_name[field].enum_type.values_by_number[getattr(msg, field)].name)


def by_name(items: Any) -> dict[str, Any]:
    return {x.preamble.name: x for x in items}


@pytest.fixture(scope="module")
def basic() -> Any:
    return build_p4info(compile_file(PROGRAMS / "basic.p4"))


@pytest.fixture(scope="module")
def fabric() -> Any:
    return build_p4info(compile_file(PROGRAMS / "fabric.p4"))


@pytest.fixture(scope="module")
def features() -> Any:
    return build_p4info(compile_file(DATA / "p4info_features.p4"))


def test_action_profile_program_is_byte_identical_to_p4cs_own_p4info() -> None:
    ours = serialize(build_p4info(compile_file(DATA / "action_profile-bmv2.p4")), "text").decode()
    assert ours == (DATA / "action_profile-bmv2.p4.p4info.txtpb").read_text()


def test_basic_has_the_ids_p4c_gave_the_tutorial_and_the_documented_scheme(basic: Any) -> None:
    assert basic.pkg_info.arch == "v1model"
    tables, actions = by_name(basic.tables), by_name(basic.actions)
    for (kind, name), known in TUTORIAL_IDS.items():
        got = (tables if kind == "table" else actions)[name].preamble.id
        assert got == known == scheme_id(kind, name), name
    t = tables["MyIngress.ipv4_lpm"]
    assert t.preamble.alias == "ipv4_lpm" and t.size == 1024
    assert [(f.id, f.name, f.bitwidth, enum(f, "match_type")) for f in t.match_fields] == [
        (1, "hdr.ipv4.dstAddr", 32, "LPM")]
    assert [r.id for r in t.action_refs] == [28792405, 25652968, 21257015]
    assert all(enum(r, "scope") == "TABLE_AND_DEFAULT" and not r.annotations for r in t.action_refs)
    assert t.const_default_action_id == 0 and not t.HasField("initial_default_action")   # default not const
    fwd = actions["MyIngress.ipv4_forward"]
    assert [(p.id, p.name, p.bitwidth) for p in fwd.params] == [(1, "dstAddr", 48), (2, "port", 9)]
    assert list(actions) == ["NoAction", "MyIngress.drop", "MyIngress.ipv4_forward"]   # p4c's order
    assert list(actions["NoAction"].preamble.annotations) == ["@corelib", '@noWarn("unused")']


def test_fabric_tables_counters_registers_field_by_field(fabric: Any) -> None:
    tables, actions = by_name(fabric.tables), by_name(fabric.actions)
    for name, t in tables.items():
        assert t.preamble.id == scheme_id("table", name)
    for name, a in actions.items():
        assert a.preamble.id == scheme_id("action", name)
    lpm = tables["FabricIngress.ipv4_lpm"]
    assert [(f.name, f.bitwidth, enum(f, "match_type")) for f in lpm.match_fields] == [
        ("hdr.ipv4.dst_addr", 32, "LPM")]
    assert lpm.size == 4096
    drop = scheme_id("action", "FabricIngress.drop_no_route")
    assert lpm.const_default_action_id == drop == lpm.initial_default_action.action_id
    watch = tables["FabricIngress.int_watchlist"]
    assert [(f.id, f.name, enum(f, "match_type")) for f in watch.match_fields] == [
        (1, "hdr.ipv4.src_addr", "TERNARY"), (2, "hdr.ipv4.dst_addr", "TERNARY"), (3, "hdr.udp.dst_port", "TERNARY")]
    assert watch.size == 256 and watch.const_default_action_id == 0
    counters = by_name(fabric.counters)
    assert {n: (enum(c.spec, "unit"), c.size) for n, c in counters.items()} == {
        "FabricIngress.port_rx": ("BOTH", 512), "FabricIngress.drop_reasons": ("PACKETS", 8),
        "FabricEgress.port_tx": ("BOTH", 512), "FabricEgress.ecn_marks": ("PACKETS", 512)}
    for name, c in counters.items():
        assert c.preamble.id == scheme_id("counter", name)
    regs = by_name(fabric.registers)     # the INT reports' per-flow sampling counters, the ports' tx bytes
    assert {n: (r.preamble.id, r.size, r.type_spec.bitstring.bit.bitwidth) for n, r in regs.items()} == {
        "FabricIngress.int_report_seq": (scheme_id("register", "FabricIngress.int_report_seq"), 1024, 32),
        "FabricEgress.tx_bytes": (scheme_id("register", "FabricEgress.tx_bytes"), 512, 32)}
    ingress_first = [t.preamble.name.split(".")[0] for t in fabric.tables]
    assert ingress_first == sorted(ingress_first, key=lambda c: c != "FabricIngress")   # V1Switch order


def test_every_section_of_a_feature_program(features: Any) -> None:
    tables = by_name(features.tables)
    assert "I.secret" not in tables                                      # @hidden
    fwd = tables["I.forward"]
    assert [(f.id, f.name, enum(f, "match_type")) for f in fwd.match_fields] == [
        (1, "hdr.ethernet.dst", "EXACT"), (2, "etype", "TERNARY")]
    refs = {r.id: (list(r.annotations), enum(r, "scope")) for r in fwd.action_refs}
    # @id(5) gets the action prefix; @name(".ns.drop_all") is global; @name("renamed") stays in control I
    assert refs == {0x01000005: ([], "TABLE_AND_DEFAULT"),
                    scheme_id("action", "ns.drop_all"): (["@defaultonly"], "DEFAULT_ONLY"),
                    scheme_id("action", "I.renamed"): (["@tableonly"], "TABLE_ONLY")}
    assert enum(fwd, "idle_timeout_behavior") == "NOTIFY_CONTROL"
    dc, dm = by_name(features.direct_counters)["I.fwd_counter"], by_name(features.direct_meters)["I.fwd_meter"]
    assert list(fwd.direct_resource_ids) == [dc.preamble.id, dm.preamble.id]
    assert dc.preamble.id == scheme_id("direct_counter", "I.fwd_counter") and enum(dc.spec, "unit") == "BOTH"
    assert dm.preamble.id == scheme_id("direct_meter", "I.fwd_meter") and enum(dm.spec, "unit") == "BYTES"
    assert dc.direct_table_id == dm.direct_table_id == fwd.preamble.id
    # a table without default_action gets p4c's implicit @defaultonly NoAction
    t1 = tables["I.t1290"]
    assert [(r.id, list(r.annotations), enum(r, "scope")) for r in t1.action_refs] == [
        (0x01000005, [], "TABLE_AND_DEFAULT"), (scheme_id("action", "NoAction"), ["@defaultonly"], "DEFAULT_ONLY")]
    consts = tables["I.consts"]
    assert consts.is_const_table and consts.has_initial_entries
    assert consts.initial_default_action.action_id == consts.const_default_action_id == 0x01000005
    assert [(a.param_id, a.value) for a in consts.initial_default_action.arguments] == [(1, b"\x00\x03")]
    (ctr,) = features.counters
    (mtr,) = features.meters
    assert (ctr.preamble.name, enum(ctr.spec, "unit"), ctr.size) == ("I.port_bytes", "BYTES", 64)
    assert (mtr.preamble.name, enum(mtr.spec, "unit"), mtr.size) == ("I.port_meter", "PACKETS", 16)
    (reg,) = features.registers
    assert reg.preamble.id == 0x16000077 and reg.type_spec.bitstring.int.bitwidth == 16   # @id(0x77), int<16>
    cpm = by_name(features.controller_packet_metadata)
    assert set(cpm) == {"packet_in", "packet_out"}
    assert cpm["packet_in"].preamble.id == scheme_id("controller_header", "packet_in_h")   # the type's name
    assert list(cpm["packet_in"].preamble.annotations) == ['@controller_header("packet_in")']
    assert [(m.id, m.name, m.bitwidth) for m in cpm["packet_out"].metadata] == [(1, "egress_port", 9), (2, "_pad", 7)]
    (vs,) = features.value_sets
    assert (vs.preamble.name, vs.size, [(m.id, m.bitwidth, enum(m, "match_type")) for m in vs.match]) == (
        "P.special_types", 4, [(1, 16, "EXACT")])
    (dig,) = features.digests
    assert (dig.preamble.name, dig.preamble.id, dig.type_spec.struct.name) == (
        "learn_t", scheme_id("digest", "learn_t"), "learn_t")
    members = features.type_info.structs["learn_t"].members
    assert [(m.name, m.type_spec.bitstring.bit.bitwidth) for m in members] == [("src", 48), ("port", 9)]


def test_controller_header_id_is_the_one_p4c_published(tmp_path: Path) -> None:
    assert OLD_SCHEME_PACKET_IN == (0x04 << 24) | (one_at_a_time("packet_in_header_t") & 0xFFFF)
    prog = tmp_path / "pin.p4"
    prog.write_text((DATA / "p4info_features.p4").read_text().replace("packet_in_h ", "packet_in_header_t "))
    cpm = by_name(build_p4info(compile_file(prog)).controller_packet_metadata)
    assert cpm["packet_in"].preamble.id == PACKET_IN_ID == scheme_id("controller_header", "packet_in_header_t")


def test_hash_collision_probes_the_later_name_in_byte_order(features: Any) -> None:
    a, b = "I.t1290", "I.t4840"                        # their hashes agree in the low 24 bits
    assert one_at_a_time(a) % (1 << 24) == one_at_a_time(b) % (1 << 24)
    tables = by_name(features.tables)
    assert tables[a].preamble.id == scheme_id("table", a)            # sorts first: keeps its hash
    assert tables[b].preamble.id == scheme_id("table", a) + 1        # probed to the next free id


def test_id_with_another_types_prefix_is_an_error(tmp_path: Path) -> None:
    src = (DATA / "p4info_features.p4").read_text().replace("@id(0x77) register", "@id(0x01000077) register")
    bad = tmp_path / "bad_id.p4"
    bad.write_text(src)
    with pytest.raises(P4Error, match=r"I.signed_reg: @id 0x1000077 has the 8-bit prefix 0x01; a register"):
        build_p4info(compile_file(bad))


@pytest.mark.parametrize("fmt", ["text", "binary", "json"])
def test_all_three_formats_round_trip_through_the_protobuf_parser(features: Any, fmt: str) -> None:
    data = serialize(features, fmt)
    back = message_class("p4.config.v1.P4Info")()
    if fmt == "text":
        text_format.Parse(data.decode(), back)
    elif fmt == "binary":
        back.ParseFromString(data)
    else:
        json_format.Parse(data.decode(), back)
    assert back == features and back.tables[0].preamble.id == features.tables[0].preamble.id


def test_cli_writes_every_listed_file_in_its_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outs = [tmp_path / "x.p4info.txtpb", tmp_path / "x.p4info.txt", tmp_path / "x.bin", tmp_path / "x.json"]
    assert main(["p4", "check", str(PROGRAMS / "basic.p4"), "--p4runtime-files", ",".join(map(str, outs))]) == 0
    assert capsys.readouterr().out.count("wrote ") == 4
    info = message_class("p4.config.v1.P4Info")()
    info.ParseFromString(outs[2].read_bytes())
    assert info.tables[0].preamble.id == 37375156
    assert outs[0].read_text() == outs[1].read_text() and '"id": 37375156' in outs[3].read_text()


@pytest.mark.parametrize("spec, message", [
    ("{d}/p.yaml", "--p4runtime-files {d}/p.yaml: unknown suffix '.yaml' (allowed: .txtpb, .txt, .bin, .json)"),
    ("{d}/nodir/p.txtpb", "--p4runtime-files {d}/nodir/p.txtpb: folder {d}/nodir does not exist"),
    ("{d}/p.bin,", "--p4runtime-files '{d}/p.bin,': empty file name"),
])
def test_cli_bad_path_or_suffix_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       spec: str, message: str) -> None:
    arg = spec.format(d=tmp_path)
    assert main(["p4", "check", str(PROGRAMS / "basic.p4"), "--p4runtime-files", arg]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [message.format(d=tmp_path)]
    assert not list(tmp_path.iterdir())


def test_key_names_are_the_ones_p4c_generates() -> None:
    (t,) = build_p4info(compile_file(DATA / "key_names.p4")).tables
    assert [(f.name, f.bitwidth) for f in t.match_fields] == [
        ("hdr.x.a[31:16]", 16), ("hdr.s[1].b", 8), ("hdr.x.isValid()", 1)]


def test_serializable_enum_key_and_parameter_carry_type_name_and_type_info() -> None:
    info = build_p4info(compile_file(DATA / "ser_enum.p4"))
    (t,) = info.tables
    (key,) = t.match_fields
    assert (key.name, key.bitwidth, key.type_name.name) == ("hdr.h.p", 8, "Proto")
    (param,) = by_name(info.actions)["I.set_proto"].params
    assert (param.name, param.bitwidth, param.type_name.name) == ("p", 8, "Proto")
    spec = info.type_info.serializable_enums["Proto"]
    assert spec.underlying_type.bitwidth == 8
    assert [(m.name, m.value) for m in spec.members] == [("TCP", b"\x06"), ("UDP", b"\x11")]


@pytest.mark.parametrize("program", sorted(p.name for p in PROGRAMS.glob("*.p4")))
def test_every_shipped_program_gets_scheme_ids_and_unique_aliases(program: str) -> None:
    info = build_p4info(compile_file(PROGRAMS / program))
    kinds = {"tables": "table", "actions": "action", "counters": "counter", "direct_counters": "direct_counter",
             "meters": "meter", "direct_meters": "direct_meter", "registers": "register", "digests": "digest",
             "action_profiles": "action_profile", "value_sets": "value_set"}
    ids, aliases = [], []
    for section, kind in kinds.items():
        for item in getattr(info, section):
            assert item.preamble.id == scheme_id(kind, item.preamble.name), (section, item.preamble.name)
            ids.append(item.preamble.id)
            aliases.append(item.preamble.alias)
            assert item.preamble.name.endswith(item.preamble.alias)
    assert len(set(ids)) == len(ids) and len(set(aliases)) == len(aliases)
    back = message_class("p4.config.v1.P4Info")()
    back.ParseFromString(serialize(info, "binary"))
    assert back == info
