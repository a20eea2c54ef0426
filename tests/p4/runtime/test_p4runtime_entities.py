"""P4Runtime entities on a pipeline (no gRPC): ternary/range priorities (higher wins), optional, direct and
indexed counters, registers, meters, action selector members and groups, the PRE, and the spec's error codes."""

from __future__ import annotations

import pytest

from p4.compiler import compile_source
from p4.p4runtime_proto import message_class
from p4.pipeline import Pipeline
from p4.runtime.client import UPDATE_TYPES, table_entry
from p4.runtime.entities import EntityError, ForwardingDevice
from sw.clock import ManualClock

pytestmark = pytest.mark.unit

PROGRAM = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> k1; bit<16> k2; bit<8> res; bit<8> sel; bit<8> o; }
struct headers { h_t h; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    direct_counter(CounterType.packets_and_bytes) dc;
    counter(4, CounterType.packets_and_bytes) cnt;
    register<bit<16>>(4) reg;
    meter(2, MeterType.bytes) mtr;
    action set_res(bit<8> v) { hdr.h.res = v; }
    action set_out(bit<8> v) { hdr.h.o = v; }
    table t_tern {
        key = { hdr.h.k1: ternary; hdr.h.k2: range; }
        actions = { set_res; NoAction; }
        counters = dc;
        default_action = NoAction();
    }
    table t_opt {
        key = { hdr.h.k1: optional; hdr.h.k2: exact; }
        actions = { set_res; NoAction; }
        default_action = NoAction();
    }
    table t_sel {
        key = { hdr.h.k1: exact; hdr.h.sel: selector; }
        actions = { set_out; NoAction; }
        implementation = action_selector(HashAlgorithm.identity, 32w16, 32w8);
    }
    apply {
        sm.egress_spec = 1;
        t_tern.apply();
        t_opt.apply();
        t_sel.apply();
        cnt.count((bit<32>)(hdr.h.k1 & 3));
        hdr.h.sel = (bit<8>)reg.read(1);
        reg.write(0, hdr.h.k2);
        bit<2> color;
        mtr.execute_meter((bit<32>)0, color);
        if (color == 2) { mark_to_drop(sm); }
    }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""
M = message_class


@pytest.fixture
def dev() -> tuple[ForwardingDevice, Pipeline]:
    pipe = Pipeline(compile_source(PROGRAM, "rt.p4"), clock=ManualClock())
    return ForwardingDevice(pipe), pipe


def write(device: ForwardingDevice, kind: str, entity: object) -> None:
    u = M("p4.v1.Update")(type=UPDATE_TYPES[kind])
    u.entity.CopyFrom(entity)
    device.write(u)


def send(pipe: Pipeline, k1: int, k2: int, sel: int = 0) -> bytes:
    out, _ = pipe.process(0, bytes([k1]) + k2.to_bytes(2, "big") + bytes([0, sel, 0]) + bytes(40))
    return out[0][1]


def test_priorities_higher_wins_and_direct_counters_read_back(dev) -> None:
    device, pipe = dev
    info = device.p4info
    write(device, "INSERT", table_entry(info, "I.t_tern", {"hdr.h.k2": (0, 1000)}, "I.set_res", {"v": 1},
                                        priority=1))
    write(device, "INSERT", table_entry(info, "I.t_tern", {"hdr.h.k1": (0x21, 0xFF), "hdr.h.k2": (100, 200)},
                                        "I.set_res", {"v": 2}, priority=10))
    assert send(pipe, 0x21, 150)[3] == 2          # both match: priority 10 beats 1
    assert send(pipe, 0x22, 150)[3] == 1
    assert send(pipe, 0x21, 201)[3] == 1
    assert send(pipe, 0x21, 1001)[3] == 0         # no entry: NoAction
    read = M("p4.v1.Entity")()
    read.table_entry.table_id = info.tables[0].preamble.id
    read.table_entry.counter_data.SetInParent()
    got = list(device.read(read))
    assert [(e.table_entry.priority, e.table_entry.counter_data.packet_count) for e in got] == [(1, 2), (10, 1)]
    assert got[1].table_entry.counter_data.byte_count == 46
    assert len(got[0].table_entry.match) == 1     # the don't-care k1 stays omitted


def test_optional_counters_and_registers(dev) -> None:
    device, pipe = dev
    info = device.p4info
    write(device, "INSERT", table_entry(info, "I.t_opt", {"hdr.h.k2": 7}, "I.set_res", {"v": 9}, priority=1))
    assert send(pipe, 0x55, 7)[3] == 9 and send(pipe, 0x56, 8)[3] == 0
    ent = M("p4.v1.Entity")()
    ent.counter_entry.counter_id = info.counters[0].preamble.id
    cells = [e.counter_entry for e in device.read(ent)]
    assert [(c.index.index, c.data.packet_count) for c in cells] == [(0, 0), (1, 1), (2, 1), (3, 0)]   # k1 & 3
    reg = M("p4.v1.Entity")()
    reg.register_entry.register_id = info.registers[0].preamble.id
    reg.register_entry.index.index = 1
    reg.register_entry.data.bitstring = b"\x00\x05"
    write(device, "MODIFY", reg)
    assert send(pipe, 0, 0x1234)[4] == 5           # the program reads reg[1] into sel
    reg.register_entry.ClearField("data")
    reg.register_entry.index.index = 0
    assert [e.register_entry.data.bitstring for e in device.read(reg)] == [b"\x12\x34"]


def test_action_selector_members_and_groups(dev) -> None:
    device, pipe = dev
    info = device.p4info
    prof = info.action_profiles[0].preamble.id
    act = {a.preamble.name: a.preamble.id for a in info.actions}["I.set_out"]
    for mid, v in ((1, 0x11), (2, 0x22)):
        m = M("p4.v1.Entity")()
        apm = m.action_profile_member
        apm.action_profile_id, apm.member_id, apm.action.action_id = prof, mid, act
        apm.action.params.add(param_id=1, value=bytes([v]))
        write(device, "INSERT", m)
    g = M("p4.v1.Entity")()
    g.action_profile_group.action_profile_id, g.action_profile_group.group_id = prof, 7
    g.action_profile_group.members.add(member_id=1, weight=1)
    g.action_profile_group.members.add(member_id=2, weight=1)
    write(device, "INSERT", g)
    e1 = table_entry(info, "I.t_sel", {"hdr.h.k1": 1})
    e1.table_entry.action.action_profile_member_id = 2
    e2 = table_entry(info, "I.t_sel", {"hdr.h.k1": 2})
    e2.table_entry.action.action_profile_group_id = 7
    write(device, "INSERT", e1)
    write(device, "INSERT", e2)
    assert send(pipe, 1, 0)[5] == 0x22
    assert {send(pipe, 2, 0, sel)[5] for sel in range(8)} <= {0x11, 0x22}
    read = M("p4.v1.Entity")()
    read.table_entry.table_id = e1.table_entry.table_id
    assert [e.table_entry.action.WhichOneof("type") for e in device.read(read)] == [
        "action_profile_member_id", "action_profile_group_id"]
    gone = M("p4.v1.Entity")()
    gone.action_profile_member.CopyFrom(M("p4.v1.ActionProfileMember")(action_profile_id=prof, member_id=2))
    with pytest.raises(EntityError) as busy:
        write(device, "DELETE", gone)
    assert busy.value.code == "FAILED_PRECONDITION"


@pytest.mark.parametrize(("entity", "code", "words"), [
    (lambda i: table_entry(i, "I.t_tern", {"hdr.h.k2": (0, 9)}, "I.set_res", {"v": 1}), "INVALID_ARGUMENT",
     "priority > 0"),
    (lambda i: table_entry(i, "I.t_tern", {"hdr.h.k1": (1, 0)}, "I.set_res", {"v": 1}, priority=1),
     "INVALID_ARGUMENT", "must be omitted"),
    (lambda i: table_entry(i, "I.t_opt", {"hdr.h.k2": 1}, "I.set_res", {"v": 300}, priority=1), "OUT_OF_RANGE",
     "does not fit in 8 bits"),
    (lambda i: table_entry(i, "I.t_opt", {}, "I.set_res", {"v": 1}, priority=1), "INVALID_ARGUMENT",
     "is exact and must be given"),
])
def test_bad_inserts_name_the_problem_with_the_specs_code(dev, entity, code, words) -> None:
    device, _ = dev
    with pytest.raises(EntityError) as err:
        write(device, "INSERT", entity(device.p4info))
    assert err.value.code == code and words in str(err.value)
    assert all(not t.entries for t in device.state.tables.values())


def test_modify_and_delete_need_the_entry_and_default_is_modify_only(dev) -> None:
    device, pipe = dev
    info = device.p4info
    e = table_entry(info, "I.t_opt", {"hdr.h.k2": 3}, "I.set_res", {"v": 4}, priority=2)
    for kind in ("MODIFY", "DELETE"):
        with pytest.raises(EntityError) as err:
            write(device, kind, e)
        assert err.value.code == "NOT_FOUND"
    write(device, "INSERT", e)
    with pytest.raises(EntityError) as dup:
        write(device, "INSERT", e)
    assert dup.value.code == "ALREADY_EXISTS"
    default = table_entry(info, "I.t_opt", action="I.set_res", params={"v": 0x66}, default=True)
    with pytest.raises(EntityError, match="can only be MODIFYed"):
        write(device, "INSERT", default)
    write(device, "MODIFY", default)
    assert send(pipe, 0, 99)[3] == 0x66 and send(pipe, 0, 3)[3] == 4
    write(device, "MODIFY", table_entry(info, "I.t_opt", default=True))        # no action: back to the initial
    assert send(pipe, 0, 99)[3] == 0
    bad = table_entry(info, "I.t_opt", {"hdr.h.k2": 3}, "I.set_res", {"v": 4}, priority=2)
    bad.table_entry.table_id = 0x02FFFFFF
    with pytest.raises(EntityError) as nf:
        write(device, "INSERT", bad)
    assert nf.value.code == "NOT_FOUND"


def test_pre_multicast_groups_clone_sessions_and_meters(dev) -> None:
    device, pipe = dev
    group = M("p4.v1.Entity")()
    mg = group.packet_replication_engine_entry.multicast_group_entry
    mg.multicast_group_id = 5
    for port, rid in ((1, 0), (2, 0), (3, 7)):
        mg.replicas.add(egress_port=port, instance=rid)
    write(device, "INSERT", group)
    assert sorted((pipe.mc_nodes[h].rid, tuple(pipe.mc_nodes[h].ports)) for h in pipe.mc_groups[5]) == [
        (0, (1, 2)), (7, (3,))]
    read = M("p4.v1.Entity")()
    read.packet_replication_engine_entry.multicast_group_entry.SetInParent()
    (got,) = device.read(read)
    assert sorted((r.egress_port, r.instance) for r in got.packet_replication_engine_entry.multicast_group_entry
                  .replicas) == [(1, 0), (2, 0), (3, 7)]
    del mg.replicas[2]
    write(device, "MODIFY", group)
    assert [pipe.mc_nodes[h].ports for h in pipe.mc_groups[5]] == [[1, 2]]
    write(device, "DELETE", group)
    assert pipe.mc_groups == {} and pipe.mc_nodes == {}
    clone = M("p4.v1.Entity")()
    cs = clone.packet_replication_engine_entry.clone_session_entry
    cs.session_id = 9
    cs.replicas.add(egress_port=4, instance=0)
    write(device, "INSERT", clone)
    assert pipe.mirror_sessions == {9: 4}
    cs.replicas.add(egress_port=5, instance=3)
    write(device, "MODIFY", clone)                      # two replicas: one copy each, rid = the instance
    assert pipe.mirror_sessions == {} and pipe.mirror_replicas == {9: [(4, 0), (5, 3)]}
    (got,) = device.read(clone)
    assert [(r.egress_port, r.instance) for r in got.packet_replication_engine_entry.clone_session_entry
            .replicas] == [(4, 0), (5, 3)]
    cs.packet_length_bytes, cs.class_of_service = 64, 8
    with pytest.raises(EntityError) as cos:
        write(device, "MODIFY", clone)
    assert cos.value.code == "INVALID_ARGUMENT" and "out of range 0..7" in str(cos.value)
    assert pipe.mirror_replicas == {9: [(4, 0), (5, 3)]} and pipe.clone_options == {}
    cs.class_of_service = 3
    write(device, "MODIFY", clone)
    assert pipe.clone_options == {9: (3, 64)}
    (got,) = device.read(clone)
    back = got.packet_replication_engine_entry.clone_session_entry
    assert (back.class_of_service, back.packet_length_bytes) == (3, 64)
    meter = M("p4.v1.Entity")()
    me = meter.meter_entry
    me.meter_id = device.p4info.meters[0].preamble.id
    me.index.index = 0
    me.config.cir, me.config.cburst, me.config.pir, me.config.pburst = 1000, 100, 2000, 100
    write(device, "MODIFY", meter)
    assert send(pipe, 0, 0) and send(pipe, 0, 0)            # 46 bytes each: within the 100-byte bursts
    assert pipe.process(0, bytes(46))[0] == []                # the third exceeds PBS: red, dropped
    me.ClearField("config")
    cells = [e.meter_entry for e in device.read(meter)]
    assert [(c.config.cir, c.config.pir, c.config.pburst) for c in cells] == [(1000, 2000, 100)]


DIRECT_METER_PROGRAM = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> k; bit<8> color; }
struct headers { h_t h; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    direct_meter<bit<8>>(MeterType.bytes) dm;
    action metered() { dm.read(hdr.h.color); }
    table t { key = { hdr.h.k: exact; } actions = { metered; NoAction; } meters = dm; default_action = NoAction(); }
    apply { sm.egress_spec = 1; t.apply(); }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) { apply { } }
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def test_direct_meter_entries_configure_read_back_and_color() -> None:
    pipe = Pipeline(compile_source(DIRECT_METER_PROGRAM, "dm.p4"), clock=ManualClock())
    device = ForwardingDevice(pipe)
    info = device.p4info
    assert [m.preamble.name for m in info.direct_meters] == ["I.dm"]
    entry = table_entry(info, "I.t", {"hdr.h.k": 1}, "I.metered", {})
    write(device, "INSERT", entry)
    colors = [pipe.process(0, bytes([1, 0]) + bytes(48))[0][0][1][1] for _ in range(3)]
    assert colors == [0, 0, 0]                                 # not configured: green
    dme = M("p4.v1.Entity")()
    dme.direct_meter_entry.table_entry.CopyFrom(entry.table_entry)
    cfg = dme.direct_meter_entry.config
    cfg.cir, cfg.cburst, cfg.pir, cfg.pburst = 1000, 60, 2000, 110
    write(device, "MODIFY", dme)
    colors = [pipe.process(0, bytes([1, 0]) + bytes(48))[0][0][1][1] for _ in range(3)]
    assert colors == [0, 1, 2]                                 # 50 B each: within CBS, within PBS, beyond (red)
    read = M("p4.v1.Entity")()
    read.direct_meter_entry.SetInParent()
    (got,) = [e.direct_meter_entry for e in device.read(read)]
    assert (got.config.cir, got.config.cburst, got.config.pir, got.config.pburst) == (1000, 60, 2000, 110)
    assert got.table_entry.match[0].exact.value == b"\x01"
    missing = M("p4.v1.Entity")()
    missing.direct_meter_entry.table_entry.CopyFrom(table_entry(info, "I.t", {"hdr.h.k": 2}, "I.metered", {})
                                                    .table_entry)
    missing.direct_meter_entry.config.CopyFrom(cfg)
    with pytest.raises(EntityError) as nf:
        write(device, "MODIFY", missing)
    assert nf.value.code == "NOT_FOUND"
    cfg.pir = 10                                               # pir < cir
    with pytest.raises(EntityError) as bad:
        write(device, "MODIFY", dme)
    assert bad.value.code == "INVALID_ARGUMENT"
    write(device, "DELETE", entry)
    write(device, "INSERT", entry)                              # a new entry: its meter starts unconfigured
    (again,) = [e.direct_meter_entry for e in device.read(read)]
    assert not again.HasField("config")
    assert pipe.process(0, bytes([1, 0]) + bytes(200))[0][0][1][1] == 0


CLONE_PROGRAM = """#include <core.p4>
#include <v1model.p4>
header h_t { bit<8> kind; bit<16> rid; bit<8> where; }
struct headers { h_t h; }
struct metadata { }
parser P(packet_in pkt, out headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    state start { pkt.extract(hdr.h); transition accept; }
}
control VC(inout headers hdr, inout metadata meta) { apply { } }
control I(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply { sm.egress_spec = 1; if (hdr.h.where == 0) { clone(CloneType.I2E, 32w9); } }
}
control E(inout headers hdr, inout metadata meta, inout standard_metadata_t sm) {
    apply {
        if (hdr.h.where == 1 && sm.instance_type == 0) { clone(CloneType.E2E, 32w9); }
        hdr.h.kind = (bit<8>)sm.instance_type; hdr.h.rid = sm.egress_rid;
    }
}
control CC(inout headers hdr, inout metadata meta) { apply { } }
control D(packet_out pkt, in headers hdr) { apply { pkt.emit(hdr.h); } }
V1Switch(P(), VC(), I(), E(), CC(), D()) main;
"""


def clone_session_device(replicas: list[tuple[int, int]], **options: int) -> tuple:
    """CLONE_PROGRAM's pipeline and device with clone session 9 inserted: (pipe, device, its Entity, the
    CloneSessionEntry in it); ``replicas`` are (egress port, instance), ``options`` its other fields."""
    pipe = Pipeline(compile_source(CLONE_PROGRAM, "clone.p4"), clock=ManualClock())
    device = ForwardingDevice(pipe)
    clone = M("p4.v1.Entity")()
    cs = clone.packet_replication_engine_entry.clone_session_entry
    cs.session_id = 9
    for name, value in options.items():
        setattr(cs, name, value)
    for port, rid in replicas:
        cs.replicas.add(egress_port=port, instance=rid)
    write(device, "INSERT", clone)
    return pipe, device, clone, cs


@pytest.mark.parametrize(("where", "clone_kind"), [(0, 1), (1, 2)])    # I2E clones: instance 1, E2E: 2
def test_a_clone_session_of_several_replicas_makes_one_copy_each(where: int, clone_kind: int) -> None:
    pipe, device, clone, _ = clone_session_device([(4, 0), (5, 3), (6, 7)])
    out, _ = pipe.process(0, bytes([0, 0, 0, where]))
    copies = sorted((port, f[0], int.from_bytes(f[1:3], "big")) for port, f in out)
    assert copies == [(1, 0, 0), (4, clone_kind, 0), (5, clone_kind, 3), (6, clone_kind, 7)]
    write(device, "DELETE", clone)
    out, _ = pipe.process(0, bytes([0, 0, 0, where]))
    assert [port for port, _ in out] == [1] and pipe.drops["clone to unconfigured mirror session"] == 1


def test_idle_timeout_on_a_table_without_support_timeout_is_invalid(dev) -> None:
    device, _ = dev
    entry = table_entry(device.p4info, "I.t_opt", {"hdr.h.k2": 7}, "I.set_res", {"v": 9}, priority=1)
    entry.table_entry.idle_timeout_ns = 10**9
    with pytest.raises(EntityError) as bad:
        write(device, "INSERT", entry)
    assert bad.value.code == "INVALID_ARGUMENT" and "support_timeout" in str(bad.value)
    assert device.state.tables["I.t_opt"].entries == {}                # nothing changed


def test_a_checkpoint_restores_tables_externs_profiles_and_the_pre(dev) -> None:
    device, pipe = dev
    info = device.p4info
    write(device, "INSERT", table_entry(info, "I.t_opt", {"hdr.h.k2": 7}, "I.set_res", {"v": 9}, priority=1))
    restore = device.checkpoint()
    write(device, "INSERT", table_entry(info, "I.t_opt", {"hdr.h.k2": 8}, "I.set_res", {"v": 5}, priority=1))
    write(device, "MODIFY", table_entry(info, "I.t_opt", {"hdr.h.k2": 7}, "I.set_res", {"v": 1}, priority=1))
    group = M("p4.v1.Entity")()
    group.packet_replication_engine_entry.multicast_group_entry.multicast_group_id = 5
    group.packet_replication_engine_entry.multicast_group_entry.replicas.add(egress_port=2, instance=0)
    write(device, "INSERT", group)
    reg = M("p4.v1.Entity")()
    reg.register_entry.register_id = info.registers[0].preamble.id
    reg.register_entry.index.index = 2
    reg.register_entry.data.bitstring = b"\x00\x07"
    write(device, "MODIFY", reg)
    assert send(pipe, 0x55, 8)[3] == 5 and send(pipe, 0x55, 7)[3] == 1 and pipe.mc_groups
    restore()
    assert send(pipe, 0x55, 8)[3] == 0 and send(pipe, 0x55, 7)[3] == 9       # back to before, on the data path
    assert pipe.mc_groups == {} and pipe.mc_nodes == {}
    assert device.state.registers["I.reg"].values[2] == 0
    tbl = device.state.tables["I.t_tern"]
    assert tbl.direct_counter is device.state.counters["I.dc"]                 # one object graph still


def test_one_shot_action_sets_make_hidden_members_and_groups(dev) -> None:
    device, pipe = dev
    info = device.p4info
    prof = device.state.tables["I.t_sel"].profile
    set_out = next(a.preamble.id for a in info.actions if a.preamble.name == "I.set_out")
    entry = table_entry(info, "I.t_sel", {"hdr.h.k1": 3})
    action_set = entry.table_entry.action.action_profile_action_set
    for v, weight in ((0x31, 1), (0x32, 3)):
        aa = action_set.action_profile_actions.add(weight=weight)
        aa.action.action_id = set_out
        aa.action.params.add(param_id=1, value=bytes([v]))
    write(device, "INSERT", entry)
    outs = [send(pipe, 3, 0, sel)[5] for sel in range(16)]
    assert set(outs) == {0x31, 0x32} and outs.count(0x32) == 3 * outs.count(0x31)   # identity hash, weights 1:3
    read = M("p4.v1.Entity")()
    read.table_entry.table_id = entry.table_entry.table_id
    (got,) = device.read(read)
    assert got.table_entry.action.action_profile_action_set == action_set       # read back as written
    members = M("p4.v1.Entity")()
    members.action_profile_member.action_profile_id = info.action_profiles[0].preamble.id
    assert list(device.read(members)) == []                                       # hidden from member reads
    del action_set.action_profile_actions[1]
    write(device, "MODIFY", entry)
    assert {send(pipe, 3, 0, sel)[5] for sel in range(16)} == {0x31} and len(prof.members) == 1
    write(device, "DELETE", entry)
    assert prof.members == {} and prof.groups == {}                                # all gone with the entry
    bad = table_entry(info, "I.t_opt", {"hdr.h.k2": 1})
    bad.table_entry.priority = 1
    bad.table_entry.action.action_profile_action_set.CopyFrom(action_set)
    with pytest.raises(EntityError) as nosel:
        write(device, "INSERT", bad)
    assert nosel.value.code == "INVALID_ARGUMENT" and "action selector" in str(nosel.value)



@pytest.mark.parametrize(("where", "clone_kind"), [(0, 1), (1, 2)])    # I2E clones: instance 1, E2E: 2
def test_clone_session_class_of_service_and_truncation_reach_the_copies(where: int, clone_kind: int) -> None:
    # the copy to port 4 is queued at priority 5 and leaves cut to 3 bytes; the original is whole on port 1
    pipe, device, clone, cs = clone_session_device([(4, 0)], class_of_service=5, packet_length_bytes=3)
    frame = bytes([0, 0, 0, where, 0xAB, 0xCD])
    queued, out, copy_priorities = list(pipe.ingress(0, frame).queued), [], []
    while queued:
        qp = queued.pop(0)
        if qp.egress_port == 4:
            copy_priorities.append(qp.priority)
        er = pipe.egress(qp)
        out += er.out
        queued += er.queued
    assert copy_priorities == [5]
    assert sorted(out) == [(1, bytes([0, 0, 0, where, 0xAB, 0xCD])), (4, bytes([clone_kind, 0, 0]))]
    cs.class_of_service, cs.packet_length_bytes = 0, 0
    write(device, "MODIFY", clone)                      # options off: the whole copy
    assert sorted(pipe.process(0, frame)[0]) == [(1, frame), (4, bytes([clone_kind, 0, 0, where, 0xAB, 0xCD]))]
