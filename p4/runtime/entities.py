"""P4Runtime entities <-> the pipeline's run-time state: table entries (exact/LPM/ternary/range/optional, default
actions, direct counters), action profile members and groups, indexed counters, meters, registers, and the PRE
(multicast groups, clone sessions).

``ForwardingDevice(pipeline)`` applies one ``p4.v1.Update`` (``write``) or answers one read ``p4.v1.Entity``
(``read``); a bad update raises ``EntityError`` with the google.rpc code the P4Runtime spec gives for it.
Priorities: P4Runtime's higher-wins number ``p`` is stored as ``-p`` in our tables (BMv2 CLI order, lower wins).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from p4.errors import CommandError, P4Error
from p4.p4info import build_p4info
from p4.p4runtime_proto import enum_value, message_class
from p4.pipeline import Pipeline
from p4.program import DROP_PORT, set_direct_meter_rates
from p4.tables import ActionSpec, Entry, Table

Entity = message_class("p4.v1.Entity")
_UPDATE = "p4.v1.Update.Type"
INSERT, MODIFY, DELETE = (enum_value(_UPDATE, n) for n in ("INSERT", "MODIFY", "DELETE"))
_PRIORITY_KINDS = ("ternary", "range", "optional")


class EntityError(P4Error):
    """A write or read the device refuses: ``code`` is a google.rpc.Code name (``INVALID_ARGUMENT``, ...)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def code_number(name: str) -> int:
    """The google.rpc.Code number of ``name``."""
    return enum_value("google.rpc.Code", name)


def to_bytes(value: int, width: int) -> bytes:
    """P4Runtime's canonical binary string of an unsigned value: no leading zero bytes, at least one byte."""
    del width      # canonical form depends on the value only (spec 8.4.2)
    return value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")


def from_bytes(data: bytes, width: int, what: str) -> int:
    """An unsigned value of ``width`` bits from a P4Runtime binary string (leading zeros allowed)."""
    if not data:
        raise EntityError("INVALID_ARGUMENT", f"{what}: empty value")
    v = int.from_bytes(data, "big")
    if v >> width:
        raise EntityError("OUT_OF_RANGE", f"{what}: value 0x{data.hex()} does not fit in {width} bits")
    return v


@dataclass
class _Profile:
    """Client-chosen member/group ids of one action profile -> our handles (P4Runtime ids are the client's)."""

    members: dict[int, int] = field(default_factory=dict)
    groups: dict[int, int] = field(default_factory=dict)
    weights: dict[int, list[tuple[int, int]]] = field(default_factory=dict)   # group id -> [(member id, weight)]
    # one-shot action sets: (table, entry handle) -> (hidden group, hidden members, the set as written)
    one_shot: dict[tuple[str, int], tuple[int, list[int], Any]] = field(default_factory=dict)


MAX_CLASS_OF_SERVICE = 7   # standard_metadata.priority is bit<3>
# Pipeline attributes
PRE_STATE = ("mc_groups", "mc_nodes", "_next_node", "mirror_sessions", "mirror_replicas", "clone_options")


class ForwardingDevice:
    """One pipeline seen through its P4Info: ids -> tables, actions, counters, registers, profiles."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.state = pipeline.state
        self.p4info = build_p4info(pipeline.program)
        info = self.p4info
        self.tables = {t.preamble.id: t for t in info.tables}
        self.actions = {a.preamble.id: a for a in info.actions}
        self.action_ids = {a.preamble.name: a.preamble.id for a in info.actions}
        self.counters = {c.preamble.id: c for c in info.counters}
        self.direct_counters = {c.preamble.id: c for c in info.direct_counters}
        self.registers = {r.preamble.id: r for r in info.registers}
        self.meters = {m.preamble.id: m for m in info.meters}
        self.digests = {d.preamble.id: d for d in info.digests}
        self.digest_ids = {d.preamble.name: d.preamble.id for d in info.digests}
        self.digest_configs: dict[int, Any] = {}     # digest id -> DigestEntry.Config of the enabled ones
        self.action_profiles = {p.preamble.id: p for p in info.action_profiles}
        self._profiles: dict[int, _Profile] = {pid: _Profile() for pid in self.action_profiles}

    def checkpoint(self) -> Callable[[], None]:
        """Everything a write can change (tables, externs, profiles and their client ids, the PRE, digest
        configs), copied now; calling the result puts it back (a batch's rollback).  The objects stay the same
        (the generated code holds them): their contents are restored."""
        st, pipe = self.state, self.pipeline
        objs: list[Any] = [*st.tables.values(), *st.registers.values(), *st.counters.values(), *st.meters.values(),
                           *st.profiles.values(), *st.value_sets.values(), *self._profiles.values()]
        keep: dict[int, Any] = {id(o): o for o in objs}         # references among them are kept, not copied
        keep.update({id(a): a for t in st.tables.values() for a in t.actions.values()})
        keep.update({id(a): a for a in st.actions.values()})
        saved = copy.deepcopy([o.__dict__ for o in objs], keep)
        pre = copy.deepcopy({k: getattr(pipe, k) for k in PRE_STATE}, keep)
        digests = {k: copy.deepcopy(v) for k, v in self.digest_configs.items()}

        def restore() -> None:
            for o, d in zip(objs, saved, strict=True):
                o.__dict__.clear()
                o.__dict__.update(d)
            for k, v in pre.items():
                setattr(pipe, k, v)
            self.digest_configs = digests
            for t in st.tables.values():
                t._rebuild()
        return restore

    # --- lookups -------------------------------------------------------------------------------------------
    def table(self, table_id: int) -> tuple[Any, Table]:
        info = self.tables.get(table_id)
        if info is None:
            raise EntityError("NOT_FOUND", f"no table with id {table_id} in the P4Info")
        return info, self.state.tables[info.preamble.name]

    def _action(self, table: Table, action_id: int) -> ActionSpec:
        a = self.actions.get(action_id)
        if a is None:
            raise EntityError("NOT_FOUND", f"no action with id {action_id} in the P4Info")
        spec = table.actions.get(a.preamble.name) if table is not None else None
        if spec is None:
            raise EntityError("INVALID_ARGUMENT", f"action {a.preamble.name} is not an action of table {table.name}")
        return spec

    def _params(self, spec: ActionSpec, params: Any) -> tuple[int, ...]:
        got: dict[int, bytes] = {}
        for p in params:
            if p.param_id in got:
                raise EntityError("INVALID_ARGUMENT", f"action {spec.name}: param id {p.param_id} given twice")
            got[p.param_id] = p.value
        if sorted(got) != list(range(1, len(spec.params) + 1)):
            want = ", ".join(f"{i}:{n}" for i, (n, _) in enumerate(spec.params, 1)) or "none"
            raise EntityError("INVALID_ARGUMENT", f"action {spec.name}: expected params {want}, got ids "
                                                  f"{sorted(got)}")
        return tuple(from_bytes(got[i], w, f"action {spec.name} param {n}")
                     for i, (n, w) in enumerate(spec.params, 1))

    # --- table entries ---------------------------------------------------------------------------------------
    def _match(self, table: Table, fields: Any) -> list[tuple[int, int]]:
        by_id: dict[int, Any] = {}
        for fm in fields:
            if not 1 <= fm.field_id <= len(table.keys):
                raise EntityError("INVALID_ARGUMENT", f"table {table.name}: no match field id {fm.field_id}")
            if fm.field_id in by_id:
                raise EntityError("INVALID_ARGUMENT", f"table {table.name}: match field id {fm.field_id} twice")
            by_id[fm.field_id] = fm
        out = []
        for i, k in enumerate(table.keys, 1):
            full = (1 << k.width) - 1
            what = f"table {table.name} field {k.name}"
            fm = by_id.get(i)
            if fm is None:            # omitted = don't care (exact fields cannot be omitted)
                if k.kind == "exact":
                    raise EntityError("INVALID_ARGUMENT", f"{what} is exact and must be given")
                out.append((0, full) if k.kind == "range" else (0, 0))
                continue
            which = fm.WhichOneof("field_match_type")
            if which != k.kind:
                raise EntityError("INVALID_ARGUMENT", f"{what} is {k.kind}, the request gives {which}")
            if k.kind == "exact":
                out.append((from_bytes(fm.exact.value, k.width, what), full))
            elif k.kind == "lpm":
                plen = fm.lpm.prefix_len
                if not 1 <= plen <= k.width:
                    raise EntityError("INVALID_ARGUMENT", f"{what}: prefix_len {plen} outside 1..{k.width} "
                                                          "(a /0 match is expressed by omitting the field)")
                mask = (full >> (k.width - plen)) << (k.width - plen)
                v = from_bytes(fm.lpm.value, k.width, what)
                if v & ~mask:
                    raise EntityError("INVALID_ARGUMENT", f"{what}: value has bits set beyond the /{plen} prefix")
                out.append((v, mask))
            elif k.kind == "ternary":
                v, m = from_bytes(fm.ternary.value, k.width, what), from_bytes(fm.ternary.mask, k.width, what)
                if m == 0:
                    raise EntityError("INVALID_ARGUMENT", f"{what}: mask 0 (don't care) must be omitted")
                if v & ~m:
                    raise EntityError("INVALID_ARGUMENT", f"{what}: value has bits set outside the mask")
                out.append((v, m))
            elif k.kind == "range":
                lo, hi = from_bytes(fm.range.low, k.width, what), from_bytes(fm.range.high, k.width, what)
                if lo > hi:
                    raise EntityError("INVALID_ARGUMENT", f"{what}: range low {lo} > high {hi}")
                out.append((lo, hi))
            else:
                out.append((from_bytes(fm.optional.value, k.width, what), full))
        return out

    def _priority(self, table: Table, te: Any) -> int:
        needs = any(k.kind in _PRIORITY_KINDS for k in table.keys)
        if needs and te.priority <= 0:
            raise EntityError("INVALID_ARGUMENT", f"table {table.name} has ternary/range/optional fields: the "
                                                  "entry needs a priority > 0")
        if not needs and te.priority:
            raise EntityError("INVALID_ARGUMENT", f"table {table.name} has only exact/LPM fields: priority must be "
                                                  "0")
        return -te.priority

    def _find(self, table: Table, match: list[tuple[int, int]], prio: int) -> Entry | None:
        for e in table.entries.values():
            if e.match == match and e.priority == prio:
                return e
        return None

    def _write_table_entry(self, kind: int, te: Any) -> None:
        info, table = self.table(te.table_id)
        if te.is_default_action:
            self._write_default(kind, table, te)
            return
        if table.const_entries:
            raise EntityError("PERMISSION_DENIED", f"table {table.name} has const entries")
        match = self._match(table, te.match)
        prio = self._priority(table, te)
        entry = self._find(table, match, prio)
        if kind == DELETE:
            if entry is None:
                raise EntityError("NOT_FOUND", f"table {table.name}: no such entry to delete")
            table.delete(entry.handle)
            self._drop_one_shot(info, table, entry.handle)
            return
        if kind == INSERT and entry is not None:
            raise EntityError("ALREADY_EXISTS", f"table {table.name}: the entry exists (handle {entry.handle})")
        if kind == MODIFY and entry is None:
            raise EntityError("NOT_FOUND", f"table {table.name}: no such entry to modify")
        if kind == INSERT and len(table.entries) >= table.size:
            raise EntityError("RESOURCE_EXHAUSTED", f"table {table.name} is full ({table.size} entries)")
        which = te.action.WhichOneof("type")
        if which is None:
            raise EntityError("INVALID_ARGUMENT", f"table {table.name}: the entry has no action")
        if te.idle_timeout_ns and not table.support_timeout:
            raise EntityError("INVALID_ARGUMENT", f"table {table.name}: idle_timeout_ns needs support_timeout = true")
        if which == "action":
            spec = self._action(table, te.action.action.action_id)
            data = self._params(spec, te.action.action.params)
            if spec.default_only:
                raise EntityError("INVALID_ARGUMENT", f"action {spec.name} is @defaultonly in table {table.name}")
            if kind == INSERT:
                entry = table.entries[table.add(match, spec, data, prio)]
            else:
                assert entry is not None
                if entry.action is None:
                    raise EntityError("INVALID_ARGUMENT", f"table {table.name} is indirect: give a member or group")
                table.modify(entry.handle, spec, data)
        elif which == "action_profile_action_set":
            group = self._one_shot_group(info, table, te.action.action_profile_action_set)
            if entry is not None:
                table.delete(entry.handle)
                self._drop_one_shot(info, table, entry.handle)
            entry = table.entries[table.add_indirect(match, group=group, priority=prio)]
            ids = self._profiles[info.implementation_id]
            hidden = ids.one_shot.pop((table.name, -1))
            ids.one_shot[(table.name, entry.handle)] = hidden
        elif which in ("action_profile_member_id", "action_profile_group_id"):
            prof = self._profiles.get(info.implementation_id)
            if prof is None:
                raise EntityError("INVALID_ARGUMENT", f"table {table.name} has no action profile")
            member = group = None
            if which == "action_profile_member_id":
                member = prof.members.get(te.action.action_profile_member_id)
                if member is None:
                    raise EntityError("NOT_FOUND", f"no member {te.action.action_profile_member_id} in the profile "
                                                   f"of table {table.name}")
            else:
                group = prof.groups.get(te.action.action_profile_group_id)
                if group is None:
                    raise EntityError("NOT_FOUND", f"no group {te.action.action_profile_group_id} in the profile "
                                                   f"of table {table.name}")
            if entry is not None:
                table.delete(entry.handle)
            entry = table.entries[table.add_indirect(match, member=member, group=group, priority=prio)]
        else:
            raise EntityError("UNIMPLEMENTED", f"table {table.name}: action type {which} is not supported")
        if te.HasField("counter_data") and table.direct_counter is not None:
            entry.packets, entry.bytes = te.counter_data.packet_count, te.counter_data.byte_count
        entry.idle_timeout_ns = max(0, te.idle_timeout_ns)
        if kind == INSERT:                   # its idle time counts from the insertion
            entry.last_hit_us, entry.idle_notified = self._now_us(), False

    def _one_shot_group(self, info: Any, table: Table, action_set: Any) -> int:
        """A one-shot action set: hidden members (an action and its weight each) in a hidden group of the
        table's action selector; the group's handle (recorded under the placeholder handle -1)."""
        ids = self._profiles.get(info.implementation_id)
        prof = table.profile
        if ids is None or prof is None or prof.algo is None:
            raise EntityError("INVALID_ARGUMENT", f"table {table.name}: one-shot action sets need an action selector")
        if not action_set.action_profile_actions:
            raise EntityError("INVALID_ARGUMENT", f"table {table.name}: an empty one-shot action set")
        actions = []
        for aa in action_set.action_profile_actions:
            spec = self._action(table, aa.action.action_id)
            if aa.weight < 0:
                raise EntityError("INVALID_ARGUMENT", f"table {table.name}: weight {aa.weight} is negative")
            actions.append((spec, self._params(spec, aa.action.params), aa.weight or 1))
        if len(prof.members) + len(actions) > prof.size:
            raise EntityError("RESOURCE_EXHAUSTED", f"action profile {prof.name} is full ({prof.size} members)")
        members = [prof.add_member(spec, data) for spec, data, _ in actions]
        group = prof.add_group()
        prof.groups[group] = [h for h, (_, _, w) in zip(members, actions, strict=True) for _ in range(w)]
        saved = type(action_set)()
        saved.CopyFrom(action_set)
        ids.one_shot[(table.name, -1)] = (group, members, saved)
        return group

    def _drop_one_shot(self, info: Any, table: Table, handle: int) -> None:
        """The hidden group and members of a one-shot entry that went away (nothing for other entries)."""
        ids = self._profiles.get(info.implementation_id)
        if ids is None or (table.name, handle) not in ids.one_shot:
            return
        group, members, _ = ids.one_shot.pop((table.name, handle))
        prof = table.profile
        del prof.groups[group]
        for m in members:
            del prof.members[m]
        for t in prof.tables:
            t._rebuild()

    def _write_default(self, kind: int, table: Table, te: Any) -> None:
        if kind != MODIFY:
            raise EntityError("INVALID_ARGUMENT", f"table {table.name}: the default entry can only be MODIFYed")
        if te.match or te.priority:
            raise EntityError("INVALID_ARGUMENT", f"table {table.name}: a default entry has no match or priority")
        if table.const_default:
            raise EntityError("PERMISSION_DENIED", f"table {table.name} has a const default_action")
        if not te.HasField("action"):
            table.reset_default()
            return
        if te.action.WhichOneof("type") != "action":
            raise EntityError("UNIMPLEMENTED", f"table {table.name}: an indirect default action")
        spec = self._action(table, te.action.action.action_id)
        data = self._params(spec, te.action.action.params)
        if spec.table_only:
            raise EntityError("INVALID_ARGUMENT", f"action {spec.name} is @tableonly in table {table.name}")
        table.set_default(spec, data)

    def entry_entity(self, table_id: int, table: Table, e: Entry, with_counter: bool) -> Any:
        """A table entry of ours as a P4Runtime ``Entity`` (priorities back to higher-wins)."""
        ent = Entity()
        te = ent.table_entry
        te.table_id = table_id
        for i, (k, (a, b)) in enumerate(zip(table.keys, e.match, strict=True), 1):
            full = (1 << k.width) - 1
            if (k.kind == "range" and (a, b) == (0, full)) or (k.kind in ("lpm", "ternary", "optional") and b == 0):
                continue                              # don't care: omitted, as the client wrote it
            fm = te.match.add()
            fm.field_id = i
            if k.kind == "exact":
                fm.exact.value = to_bytes(a, k.width)
            elif k.kind == "lpm":
                fm.lpm.value, fm.lpm.prefix_len = to_bytes(a, k.width), bin(b).count("1")
            elif k.kind == "ternary":
                fm.ternary.value, fm.ternary.mask = to_bytes(a, k.width), to_bytes(b, k.width)
            elif k.kind == "range":
                fm.range.low, fm.range.high = to_bytes(a, k.width), to_bytes(b, k.width)
            else:
                fm.optional.value = to_bytes(a, k.width)
        te.priority = -e.priority
        if e.action is not None:
            self._action_message(te.action.action, e.action, e.data)
        else:
            prof = self._profiles[self.tables[table_id].implementation_id]
            if (table.name, e.handle) in prof.one_shot:
                te.action.action_profile_action_set.CopyFrom(prof.one_shot[(table.name, e.handle)][2])
            elif e.member is not None:
                te.action.action_profile_member_id = _client_id(prof.members, e.member)
            else:
                te.action.action_profile_group_id = _client_id(prof.groups, e.group)
        if with_counter and table.direct_counter is not None:
            te.counter_data.packet_count, te.counter_data.byte_count = e.packets, e.bytes
        te.idle_timeout_ns = e.idle_timeout_ns
        return ent

    def _now_us(self) -> int:
        return self.pipeline.clock.now_ns() // 1000

    def idle_entries(self) -> list[Any]:
        """Entries of support_timeout tables unhit for their idle_timeout_ns and not reported yet, as table
        entities (each reported once until hit again); run in the switch's loop."""
        now_us, out = self._now_us(), []
        for tid, (_info, table) in ((tid, self.table(tid)) for tid in self.tables):
            if not table.support_timeout:
                continue
            for e in sorted(table.entries.values(), key=lambda e: e.handle):
                if e.idle_timeout_ns and not e.idle_notified and (now_us - e.last_hit_us) * 1000 >= e.idle_timeout_ns:
                    e.idle_notified = True
                    out.append(self.entry_entity(tid, table, e, False).table_entry)
        return out

    def _action_message(self, msg: Any, spec: ActionSpec, data: tuple[int, ...]) -> None:
        msg.action_id = self.action_ids[spec.name]
        for i, ((_, width), v) in enumerate(zip(spec.params, data, strict=True), 1):
            p = msg.params.add()
            p.param_id, p.value = i, to_bytes(v, width)

    def _read_table_entries(self, te: Any) -> Iterator[Any]:
        ids = [te.table_id] if te.table_id else list(self.tables)
        with_counter = te.HasField("counter_data")
        for tid in ids:
            _, table = self.table(tid)
            if te.is_default_action:
                ent = Entity()
                ent.table_entry.table_id, ent.table_entry.is_default_action = tid, True
                if table.default_action is not None:
                    self._action_message(ent.table_entry.action.action, table.default_action, table.default_data)
                yield ent
                continue
            entries = list(table.entries.values())
            if te.match:
                match, prio = self._match(table, te.match), -te.priority
                entries = [e for e in entries if e.match == match and e.priority == prio]
            since = te.HasField("time_since_last_hit") and table.support_timeout
            for e in sorted(entries, key=lambda e: e.handle):
                ent = self.entry_entity(tid, table, e, with_counter)
                if since:
                    ent.table_entry.time_since_last_hit.elapsed_ns = max(0, self._now_us() - e.last_hit_us) * 1000
                yield ent

    # --- action profiles -------------------------------------------------------------------------------------
    def _profile(self, profile_id: int) -> tuple[_Profile, Any]:
        info = self.action_profiles.get(profile_id)
        if info is None:
            raise EntityError("NOT_FOUND", f"no action profile with id {profile_id} in the P4Info")
        return self._profiles[profile_id], self.state.profiles[info.preamble.name]

    def _write_member(self, kind: int, m: Any) -> None:
        ids, prof = self._profile(m.action_profile_id)
        handle = ids.members.get(m.member_id)
        _check_exists(kind, handle is not None, f"profile {prof.name}: member {m.member_id}")
        if kind == DELETE:
            if any(handle in g for g in prof.groups.values()) or any(
                    e.member == handle for t in prof.tables for e in t.entries.values()):
                raise EntityError("FAILED_PRECONDITION", f"profile {prof.name}: member {m.member_id} is in use")
            del prof.members[handle], ids.members[m.member_id]
            return
        if not prof.tables:
            raise EntityError("INVALID_ARGUMENT", f"profile {prof.name} serves no table")
        spec = self._action(prof.tables[0], m.action.action_id)
        data = self._params(spec, m.action.params)
        if handle is None:
            ids.members[m.member_id] = prof.add_member(spec, data)
        else:
            prof.members[handle].action, prof.members[handle].data = spec, data
        for t in prof.tables:
            t._rebuild()

    def _write_group(self, kind: int, g: Any) -> None:
        ids, prof = self._profile(g.action_profile_id)
        handle = ids.groups.get(g.group_id)
        _check_exists(kind, handle is not None, f"profile {prof.name}: group {g.group_id}")
        if kind == DELETE:
            if any(e.group == handle for t in prof.tables for e in t.entries.values()):
                raise EntityError("FAILED_PRECONDITION", f"profile {prof.name}: group {g.group_id} is in use")
            del prof.groups[handle], ids.groups[g.group_id], ids.weights[g.group_id]
            return
        members: list[int] = []
        weights = []
        for gm in g.members:
            mh = ids.members.get(gm.member_id)
            if mh is None:
                raise EntityError("NOT_FOUND", f"profile {prof.name}: group {g.group_id} names no-such member "
                                               f"{gm.member_id}")
            weight = gm.weight or 1
            members += [mh] * weight              # the selector hashes over the list: weight = repetitions
            weights.append((gm.member_id, weight))
        if handle is None:
            try:
                handle = prof.add_group()
            except CommandError as exc:
                raise EntityError("INVALID_ARGUMENT", str(exc)) from None
            ids.groups[g.group_id] = handle
        prof.groups[handle] = members
        ids.weights[g.group_id] = weights
        for t in prof.tables:
            t._rebuild()

    # --- counters and registers ----------------------------------------------------------------------------
    def _counter(self, counter_id: int) -> Any:
        info = self.counters.get(counter_id)
        if info is None:
            raise EntityError("NOT_FOUND", f"no counter with id {counter_id} in the P4Info")
        return self.state.counters[info.preamble.name]

    def _indices(self, msg: Any, size: int, what: str) -> range:
        if not msg.HasField("index"):
            return range(size)
        i = msg.index.index
        if not 0 <= i < size:
            raise EntityError("OUT_OF_RANGE", f"{what}: index {i} outside 0..{size - 1}")
        return range(i, i + 1)

    def _cells(self, msg: Any, given_id: int, all_ids: dict[int, Any], lookup: Any) -> Iterator[tuple[int, Any, int]]:
        """(id, extern, index) of every cell a counter/register read names: all objects when the id is 0, all
        indices when none is given."""
        for oid in [given_id] if given_id else list(all_ids):
            obj = lookup(oid)
            for i in self._indices(msg, obj.size, f"{obj.kind} {obj.name}"):
                yield oid, obj, i

    def _register(self, register_id: int) -> Any:
        info = self.registers.get(register_id)
        if info is None:
            raise EntityError("NOT_FOUND", f"no register with id {register_id} in the P4Info")
        return self.state.registers[info.preamble.name]

    # --- entry points ----------------------------------------------------------------------------------------
    def write(self, update: Any) -> None:
        """Apply one ``p4.v1.Update``; raises ``EntityError`` (nothing changed) when it cannot."""
        kind = update.type
        if kind not in (INSERT, MODIFY, DELETE):
            raise EntityError("INVALID_ARGUMENT", f"update type {kind} is not INSERT, MODIFY or DELETE")
        ent = update.entity
        which = ent.WhichOneof("entity")
        writers = {"table_entry": self._write_table_entry, "action_profile_member": self._write_member,
                   "action_profile_group": self._write_group, "counter_entry": self._write_counter,
                   "direct_counter_entry": self._write_direct_counter, "register_entry": self._write_register,
                   "direct_meter_entry": self._write_direct_meter,
                   "packet_replication_engine_entry": self._write_pre, "meter_entry": self._write_meter,
                   "digest_entry": self._write_digest}
        if which is None:
            raise EntityError("INVALID_ARGUMENT", "the update has no entity")
        if which not in writers:
            raise EntityError("UNIMPLEMENTED", f"writing {which} is not supported by this switch")
        try:
            writers[which](kind, getattr(ent, which))
        except CommandError as exc:       # a check of the tables themselves (size, scope)
            raise EntityError("INVALID_ARGUMENT", str(exc)) from None

    def _write_counter(self, kind: int, ce: Any) -> None:
        if kind != MODIFY:
            raise EntityError("INVALID_ARGUMENT", "counter entries can only be MODIFYed")
        c = self._counter(ce.counter_id)
        for i in self._indices(ce, c.size, f"counter {c.name}"):
            c.packets[i], c.bytes[i] = ce.data.packet_count, ce.data.byte_count

    def _direct_entry(self, kind: int, te: Any, resource: str) -> tuple[Table, Entry]:
        """The table and entry a direct counter/meter entry names (MODIFY only; the table must own the
        ``resource``: its attribute, ``direct_counter`` or ``direct_meter``)."""
        what = resource.replace("_", " ")
        if kind != MODIFY:
            raise EntityError("INVALID_ARGUMENT", f"{what} entries can only be MODIFYed")
        _, table = self.table(te.table_id)
        e = self._find(table, self._match(table, te.match), self._priority(table, te))
        if e is None or getattr(table, resource) is None:
            raise EntityError("NOT_FOUND", f"table {table.name}: no such entry with a {what}")
        return table, e

    def _write_direct_counter(self, kind: int, dce: Any) -> None:
        _, e = self._direct_entry(kind, dce.table_entry, "direct_counter")
        e.packets, e.bytes = dce.data.packet_count, dce.data.byte_count

    def _write_register(self, kind: int, re_: Any) -> None:
        if kind != MODIFY:
            raise EntityError("INVALID_ARGUMENT", "register entries can only be MODIFYed")
        r = self._register(re_.register_id)
        if re_.data.WhichOneof("data") != "bitstring":
            raise EntityError("INVALID_ARGUMENT", f"register {r.name}: data must be a bitstring")
        v = from_bytes(re_.data.bitstring, r.width, f"register {r.name}")
        if r.signed and v >> (r.width - 1):
            v -= 1 << r.width
        for i in self._indices(re_, r.size, f"register {r.name}"):
            r.values[i] = v

    # --- packet replication engine: multicast groups and clone sessions -----------------------------------------
    def _write_pre(self, kind: int, pre: Any) -> None:
        which = pre.WhichOneof("type")
        if which == "multicast_group_entry":
            self._write_mc_group(kind, pre.multicast_group_entry)
        elif which == "clone_session_entry":
            self._write_clone_session(kind, pre.clone_session_entry)
        else:
            raise EntityError("INVALID_ARGUMENT", "the PRE entry has neither a multicast group nor a clone session")

    def _replica_ports(self, replicas: Any, what: str) -> dict[int, list[int]]:
        """instance (BMv2's rid) -> egress ports of a replica list."""
        by_rid: dict[int, list[int]] = {}
        for r in replicas:
            if not 0 <= r.egress_port < DROP_PORT:
                raise EntityError("OUT_OF_RANGE", f"{what}: egress port {r.egress_port} outside 0..{DROP_PORT - 1}")
            if r.egress_port in by_rid.get(r.instance, []):
                raise EntityError("INVALID_ARGUMENT", f"{what}: replica ({r.egress_port}, {r.instance}) twice")
            by_rid.setdefault(r.instance, []).append(r.egress_port)
        return by_rid

    def _write_mc_group(self, kind: int, g: Any) -> None:
        pipe, gid = self.pipeline, g.multicast_group_id
        what = f"multicast group {gid}"
        if not 0 < gid < 65536:
            raise EntityError("OUT_OF_RANGE", f"{what}: id outside 1..65535")
        _check_exists(kind, gid in pipe.mc_groups, what)
        by_rid = self._replica_ports(g.replicas, what)
        if kind != INSERT:
            for h in list(pipe.mc_groups[gid]):
                pipe.mc_node_destroy(h)
            pipe.mc_group_destroy(gid)
        if kind != DELETE:
            pipe.mc_group_create(gid)
            for rid, ports in sorted(by_rid.items()):
                pipe.mc_node_associate(gid, pipe.mc_node_create(rid, ports))

    def _write_clone_session(self, kind: int, c: Any) -> None:
        """A clone session: one replica of instance 0 is a mirroring session (``mirroring_add``); several
        replicas make one copy each, its ``egress_rid`` the replica's instance.  ``class_of_service`` is the
        copies' queue priority (0..7, v1model's 3-bit priority); ``packet_length_bytes`` truncates them."""
        pipe, sid = self.pipeline, c.session_id
        what = f"clone session {sid}"
        _check_exists(kind, sid in pipe.mirror_sessions or sid in pipe.mirror_replicas, what)
        by_rid = self._replica_ports(c.replicas, what) if kind != DELETE else {}
        if kind != DELETE and not by_rid:
            raise EntityError("INVALID_ARGUMENT", f"{what}: needs at least one replica")
        if kind != DELETE and c.class_of_service > MAX_CLASS_OF_SERVICE:
            raise EntityError("INVALID_ARGUMENT", f"{what}: class_of_service {c.class_of_service} out of range "
                                                  f"0..{MAX_CLASS_OF_SERVICE} (the v1model priority queues)")
        pipe.mirror_sessions.pop(sid, None)
        pipe.mirror_replicas.pop(sid, None)
        pipe.clone_options.pop(sid, None)
        if kind == DELETE:
            return
        if c.class_of_service or c.packet_length_bytes:
            pipe.clone_options[sid] = (c.class_of_service, c.packet_length_bytes)
        replicas = [(r.egress_port, r.instance) for r in c.replicas]
        if replicas == [(replicas[0][0], 0)]:
            pipe.mirror_sessions[sid] = replicas[0][0]
        else:
            pipe.mirror_replicas[sid] = replicas

    def _read_pre(self, pre: Any) -> Iterator[Any]:
        pipe = self.pipeline
        if pre.WhichOneof("type") == "clone_session_entry":
            sid = pre.clone_session_entry.session_id
            for s in sorted({*pipe.mirror_sessions, *pipe.mirror_replicas}):
                if sid in (0, s):
                    out = Entity()
                    cs = out.packet_replication_engine_entry.clone_session_entry
                    cs.session_id = s
                    cs.class_of_service, cs.packet_length_bytes = pipe.clone_options.get(s, (0, 0))
                    for port, rid in pipe.clone_targets(s) or ():
                        cs.replicas.add(egress_port=port, instance=rid)
                    yield out
            return
        gid = pre.multicast_group_entry.multicast_group_id
        for g, nodes in sorted(pipe.mc_groups.items()):
            if gid in (0, g):
                out = Entity()
                mg = out.packet_replication_engine_entry.multicast_group_entry
                mg.multicast_group_id = g
                for h in nodes:
                    node = pipe.mc_nodes[h]
                    for port in node.ports:
                        mg.replicas.add(egress_port=port, instance=node.rid)
                yield out

    # --- digests -------------------------------------------------------------------------------------------------
    def _write_digest(self, kind: int, de: Any) -> None:
        if de.digest_id not in self.digests:
            raise EntityError("NOT_FOUND", f"no digest with id {de.digest_id} in the P4Info")
        what = f"digest {self.digests[de.digest_id].preamble.name}"
        _check_exists(kind, de.digest_id in self.digest_configs, f"{what} configuration")
        if kind == DELETE:
            del self.digest_configs[de.digest_id]
        else:
            self.digest_configs[de.digest_id] = type(de.config)()
            self.digest_configs[de.digest_id].CopyFrom(de.config)

    def digest_data(self, digest: dict[str, Any]) -> tuple[int, Any] | None:
        """(digest id, P4Data struct) of a digest the pipeline made, None unless the controller enabled it."""
        did = self.digest_ids.get(digest["name"])
        if did is None or did not in self.digest_configs:
            return None
        data = message_class("p4.v1.P4Data")()
        members = self.p4info.type_info.structs[digest["name"]].members
        for m, value in zip(members, digest["fields"].values(), strict=True):
            data.struct.members.add().bitstring = to_bytes(value, m.type_spec.bitstring.bit.bitwidth)
        return did, data

    # --- meters ------------------------------------------------------------------------------------------------
    def _meter(self, meter_id: int) -> Any:
        info = self.meters.get(meter_id)
        if info is None:
            raise EntityError("NOT_FOUND", f"no meter with id {meter_id} in the P4Info")
        return self.state.meters[info.preamble.name]

    @staticmethod
    def _meter_rates(cfg: Any, what: str) -> list[tuple[float, int]]:
        """A ``p4.v1.MeterConfig`` (rates per second) as the meters' (rate per microsecond, burst) pairs."""
        if cfg.pir < cfg.cir or cfg.cburst < 0 or cfg.pburst < 0 or cfg.cir < 0:
            raise EntityError("INVALID_ARGUMENT", f"{what}: need 0 <= cir <= pir and bursts >= 0")
        return [(cfg.cir / 1e6, cfg.cburst), (cfg.pir / 1e6, cfg.pburst)]

    @staticmethod
    def _meter_config(out: Any, rates: list[tuple[float, int]]) -> None:
        """Fill a ``p4.v1.MeterConfig`` from (rate per microsecond, burst) pairs."""
        (cir, cburst), (pir, pburst) = rates
        out.cir, out.cburst, out.pir, out.pburst = round(cir * 1e6), cburst, round(pir * 1e6), pburst

    def _write_meter(self, kind: int, me: Any) -> None:
        if kind != MODIFY:
            raise EntityError("INVALID_ARGUMENT", "meter entries can only be MODIFYed")
        m = self._meter(me.meter_id)
        rates = self._meter_rates(me.config, f"meter {m.name}")
        for i in self._indices(me, m.size, f"meter {m.name}"):
            m.set_rates(i, rates)

    def _write_direct_meter(self, kind: int, dme: Any) -> None:
        """A table entry's direct meter: MODIFY its rates (the entry must exist and its table own one)."""
        table, e = self._direct_entry(kind, dme.table_entry, "direct_meter")
        rates = self._meter_rates(dme.config, f"direct meter {table.direct_meter.name}")
        set_direct_meter_rates(self.state.tables.values(), table.direct_meter, e.handle, rates)

    def read(self, ent: Any) -> Iterator[Any]:
        """The entities matching one read request entity (an unset id reads all of that kind)."""
        which = ent.WhichOneof("entity")
        if which == "table_entry":
            yield from self._read_table_entries(ent.table_entry)
        elif which == "counter_entry":
            for cid, c, i in self._cells(ent.counter_entry, ent.counter_entry.counter_id, self.counters,
                                         self._counter):
                out = Entity()
                ce = out.counter_entry
                ce.counter_id, ce.index.index = cid, i
                ce.data.packet_count, ce.data.byte_count = c.packets[i], c.bytes[i]
                yield out
        elif which == "direct_counter_entry":
            te = ent.direct_counter_entry.table_entry
            ids = [te.table_id] if te.table_id else list(self.tables)
            for tid in ids:
                _, table = self.table(tid)
                if table.direct_counter is None:
                    continue
                for e in sorted(table.entries.values(), key=lambda e: e.handle):
                    out = Entity()
                    out.direct_counter_entry.table_entry.CopyFrom(self.entry_entity(tid, table, e, False)
                                                                  .table_entry)
                    out.direct_counter_entry.data.packet_count = e.packets
                    out.direct_counter_entry.data.byte_count = e.bytes
                    yield out
        elif which == "packet_replication_engine_entry":
            yield from self._read_pre(ent.packet_replication_engine_entry)
        elif which == "meter_entry":
            for mid, m, i in self._cells(ent.meter_entry, ent.meter_entry.meter_id, self.meters, self._meter):
                out = Entity()
                out.meter_entry.meter_id, out.meter_entry.index.index = mid, i
                c = m.cells[i]
                if c.configured:
                    self._meter_config(out.meter_entry.config, [(c.cir, c.cburst), (c.pir, c.pburst)])
                yield out
        elif which == "direct_meter_entry":
            te = ent.direct_meter_entry.table_entry
            for tid in [te.table_id] if te.table_id else list(self.tables):
                _, table = self.table(tid)
                m = table.direct_meter
                if m is None:
                    continue
                for e in sorted(table.entries.values(), key=lambda e: e.handle):
                    out = Entity()
                    out.direct_meter_entry.table_entry.CopyFrom(self.entry_entity(tid, table, e, False).table_entry)
                    if e.handle in m.entry_rates:          # unset config: the meter is not configured (green)
                        self._meter_config(out.direct_meter_entry.config, m.entry_rates[e.handle])
                    yield out
        elif which == "digest_entry":
            for did, cfg in sorted(self.digest_configs.items()):
                if ent.digest_entry.digest_id in (0, did):
                    out = Entity()
                    out.digest_entry.digest_id = did
                    out.digest_entry.config.CopyFrom(cfg)
                    yield out
        elif which == "register_entry":
            for rid, r, i in self._cells(ent.register_entry, ent.register_entry.register_id, self.registers,
                                         self._register):
                out = Entity()
                out.register_entry.register_id, out.register_entry.index.index = rid, i
                out.register_entry.data.bitstring = to_bytes(r.values[i] & ((1 << r.width) - 1), r.width)
                yield out
        elif which == "action_profile_member":
            pid = ent.action_profile_member.action_profile_id
            for p in [pid] if pid else list(self.action_profiles):
                ids, prof = self._profile(p)
                for mid, h in sorted(ids.members.items()):
                    out = Entity()
                    m = out.action_profile_member
                    m.action_profile_id, m.member_id = p, mid
                    self._action_message(m.action, prof.members[h].action, prof.members[h].data)
                    yield out
        elif which == "action_profile_group":
            pid = ent.action_profile_group.action_profile_id
            for p in [pid] if pid else list(self.action_profiles):
                ids, _prof = self._profile(p)
                for gid in sorted(ids.groups):
                    out = Entity()
                    g = out.action_profile_group
                    g.action_profile_id, g.group_id = p, gid
                    for mid, w in ids.weights.get(gid, []):
                        gm = g.members.add()
                        gm.member_id, gm.weight = mid, w
                    yield out
        else:
            raise EntityError("UNIMPLEMENTED", f"reading {which} is not supported by this switch")


def entity_p4_id(entity: Any) -> int | None:
    """The P4Info id of the object an Entity writes (a table's for its entries and direct resources); None for
    the packet replication engine's entries, which are no P4 object."""
    which = entity.WhichOneof("entity")
    e = getattr(entity, which) if which else None
    if which in ("table_entry",):
        return int(e.table_id)
    if which in ("direct_counter_entry", "direct_meter_entry"):
        return int(e.table_entry.table_id)
    if which in ("action_profile_member", "action_profile_group"):
        return int(e.action_profile_id)
    for id_field in ("counter_id", "meter_id", "register_id", "digest_id", "value_set_id"):
        if e is not None and id_field in e.DESCRIPTOR.fields_by_name:
            return int(getattr(e, id_field))
    return None


def _check_exists(kind: int, present: bool, what: str) -> None:
    """INSERT needs ``what`` absent (ALREADY_EXISTS), MODIFY and DELETE need it present (NOT_FOUND)."""
    if kind == INSERT and present:
        raise EntityError("ALREADY_EXISTS", f"{what} exists")
    if kind != INSERT and not present:
        raise EntityError("NOT_FOUND", f"{what} does not exist")


def _client_id(ids: dict[int, int], handle: int | None) -> int:
    """The client's id of one of our member/group handles."""
    for cid, h in ids.items():
        if h == handle:
            return cid
    raise EntityError("INTERNAL", f"handle {handle} has no client id")
