"""P4Info of a compiled program, with the names and ids p4c gives (``p4 check --p4runtime-files``).

Built over the compiled ``Program``'s public objects (tables, actions, externs, digests) and its
``control_plane`` facts (annotations, controller headers); written as protobuf text, binary or JSON.

Ids follow p4c's scheme as implemented in p4lang/p4c ``control-plane/p4RuntimeSymbolTable.cpp``
(``externalId``, ``tryToAssignId``, ``computeIdsForSymbols``, ``probeForId``, ``jenkinsOneAtATimeHash``):
the top 8 bits are the resource type (``P4Ids.Prefix``), an ``@id(n)`` annotation is taken first (its prefix
added when the top byte is zero, an error when it is another type's), then per resource type in increasing
prefix order the remaining names, sorted bytewise, get the low 24 bits of the Jenkins one-at-a-time hash of
the name; on a collision the hash value (not the id) is incremented until a free id is found.
Aliases are the shortest unique dot-separated suffix over all symbols (``P4SymbolSuffixSet``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p4.errors import P4Error
from p4.p4runtime_proto import enum_value, json_format, message_class, text_format
from p4.program import Program

_PREFIX = "p4.config.v1.P4Ids.Prefix"
ACTION, TABLE, VALUE_SET, CONTROLLER_HEADER = (enum_value(_PREFIX, n) for n in (
    "ACTION", "TABLE", "VALUE_SET", "CONTROLLER_HEADER"))
ACTION_PROFILE, COUNTER, DIRECT_COUNTER, METER, DIRECT_METER, REGISTER, DIGEST = (enum_value(_PREFIX, n) for n in (
    "ACTION_PROFILE", "COUNTER", "DIRECT_COUNTER", "METER", "DIRECT_METER", "REGISTER", "DIGEST"))
_KIND = {ACTION: "action", TABLE: "table", VALUE_SET: "value set", CONTROLLER_HEADER: "controller header",
         ACTION_PROFILE: "action profile", COUNTER: "counter", DIRECT_COUNTER: "direct counter", METER: "meter",
         DIRECT_METER: "direct meter", REGISTER: "register", DIGEST: "digest"}

SUFFIXES = {".txtpb": "text", ".txt": "text", ".bin": "binary", ".json": "json"}
_MATCH = {k: enum_value("p4.config.v1.MatchField.MatchType", k.upper())
          for k in ("exact", "lpm", "ternary", "range", "optional")}
_COUNTER_UNIT = {k: enum_value("p4.config.v1.CounterSpec.Unit", u) for k, u in (
    ("packets", "PACKETS"), ("bytes", "BYTES"), ("packets_and_bytes", "BOTH"))}
_METER_UNIT = {k: enum_value("p4.config.v1.MeterSpec.Unit", k.upper()) for k in ("packets", "bytes")}
_DEFAULT_ONLY = enum_value("p4.config.v1.ActionRef.Scope", "DEFAULT_ONLY")
_TABLE_ONLY = enum_value("p4.config.v1.ActionRef.Scope", "TABLE_ONLY")
_NOTIFY_CONTROL = enum_value("p4.config.v1.Table.IdleTimeoutBehavior", "NOTIFY_CONTROL")
P4Info = message_class("p4.config.v1.P4Info")
_ID_BITS = 0xFFFFFF
TEXT_HEADER = "# proto-file: p4/config/v1/p4info.proto\n# proto-message: p4.config.v1.P4Info\n\n"


def jenkins_one_at_a_time(name: str) -> int:
    """Bob Jenkins' one-at-a-time hash of the name's bytes (32-bit), p4c's name hash."""
    h = 0
    for b in name.encode():
        h = (h + b) & 0xFFFFFFFF
        h = (h + (h << 10)) & 0xFFFFFFFF
        h ^= h >> 6
    h = (h + (h << 3)) & 0xFFFFFFFF
    h ^= h >> 11
    return (h + (h << 15)) & 0xFFFFFFFF


@dataclass
class SymbolTable:
    """Control-plane names per resource type and the ids assigned to them (``assign_ids``)."""

    explicit: dict[tuple[int, str], int | None] = field(default_factory=dict)   # (prefix, name) -> @id
    ids: dict[tuple[int, str], int] = field(default_factory=dict)
    _taken: set[int] = field(default_factory=set)

    def add(self, prefix: int, name: str, at_id: int | None = None, where: str = "") -> None:
        """Record a symbol; an ``@id`` is checked and reserved at once (p4c: ``externalId``/``tryToAssignId``)."""
        if (prefix, name) in self.explicit:
            return
        if at_id is not None:
            if not 0 <= at_id <= 0xFFFFFFFF:
                raise P4Error(f"{where or name}: @id {at_id} is not a 32-bit unsigned integer")
            top = at_id >> 24
            if top not in (0, prefix):
                raise P4Error(f"{where or name}: @id {at_id:#x} has the 8-bit prefix {top:#04x}; "
                              f"a {_kind(prefix)} id needs {prefix:#04x} (or 0)")
            at_id |= prefix << 24
            if at_id in self._taken:
                raise P4Error(f"{where or name}: @id {at_id} is assigned to multiple declarations")
            self._taken.add(at_id)
            self.ids[(prefix, name)] = at_id
        self.explicit[(prefix, name)] = at_id

    def assign_ids(self) -> None:
        """Hash ids for the symbols without ``@id``: per type by prefix, names sorted bytewise, linear probing."""
        for prefix in sorted({p for p, _ in self.explicit}):
            names = sorted((n for p, n in self.explicit if p == prefix and (p, n) not in self.ids),
                           key=lambda n: n.encode())
            for name in names:
                start = value = jenkins_one_at_a_time(name)
                while (prefix << 24) | (value & _ID_BITS) in self._taken:
                    value = (value + 1) & 0xFFFFFFFF
                    if value == start:
                        raise P4Error(f"no P4Runtime id left for {_kind(prefix)} {name}")
                pid = (prefix << 24) | (value & _ID_BITS)
                self._taken.add(pid)
                self.ids[(prefix, name)] = pid

    def id(self, prefix: int, name: str) -> int:
        """The id assigned to symbol ``name`` of resource type ``prefix``."""
        return self.ids[(prefix, name)]

    def aliases(self) -> dict[str, str]:
        """Shortest unique suffix (in dot-separated components) of every name, over all resource types."""
        names = {n for _, n in self.explicit}
        counts: dict[tuple[str, ...], int] = {}
        for n in names:
            parts = tuple(n.split("."))
            for k in range(1, len(parts) + 1):
                counts[parts[-k:]] = counts.get(parts[-k:], 0) + 1
        out = {}
        for n in names:
            parts = tuple(n.split("."))
            k = next((k for k in range(1, len(parts) + 1) if counts[parts[-k:]] < 2), len(parts))
            out[n] = ".".join(parts[-k:])
        return out


def _kind(prefix: int) -> str:
    """The resource type's name for messages (``register``)."""
    return _KIND[prefix]


def _at_id(anns: dict[str, list], name: str) -> int | None:
    """The value of an ``@id(n)`` annotation, or None."""
    vals = anns.get("id")
    if vals is None:
        return None
    if len(vals) != 1 or not isinstance(vals[0], int):
        raise P4Error(f"{name}: @id takes one integer, got {vals}")
    return int(vals[0])


_NOT_IN_PREAMBLE = ("name", "id", "brief", "description")   # p4c: represented elsewhere (Helpers::addAnnotations)


def annotation_strings(anns: dict[str, list]) -> list[str]:
    """A declaration's annotations as p4c writes them into a preamble: ``@corelib``, ``@noWarn("unused")``."""
    out = []
    for name, args in anns.items():
        if name in _NOT_IN_PREAMBLE:
            continue
        body = ", ".join(f'"{a}"' if isinstance(a, str) else str(a) for a in args)
        out.append(f"@{name}({body})" if args else f"@{name}")
    return out


def _bits(width: int, signed: bool = False) -> Any:
    """P4DataTypeSpec of ``bit<width>`` (or ``int<width>``)."""
    spec = message_class("p4.config.v1.P4DataTypeSpec")()
    (spec.bitstring.int if signed else spec.bitstring.bit).bitwidth = width
    return spec


def build_p4info(prog: Program) -> Any:
    """The P4Info message of a compiled v1model program (content and ids as p4c writes them)."""
    cp = prog.control_plane
    anns = cp.annotations

    def in_p4c_order(objs: dict) -> dict:
        """p4c walks the V1Switch blocks in argument order, each control's top-level actions (localized at
        the top of the control) before its own declarations."""
        def key(name: str) -> tuple[int, int]:
            top = name.split(".")[0]
            block = cp.block_order.index(top) if top in cp.block_order else len(cp.block_order)
            return (block, 1) if "." in name else (-1, 0)
        return {n: objs[n] for n in sorted(objs, key=key)}

    all_tables = in_p4c_order(dict(prog.tables))    # @hidden ones too: p4c gives them ids, then leaves them out
    tables = {n: t for n, t in all_tables.items() if "hidden" not in anns.get(n, {})}
    used = {a: t.actions[a] for t in all_tables.values() for a in t.actions}
    all_actions = in_p4c_order({**{n: s for n, s in used.items() if n not in prog.actions}, **prog.actions})
    actions = {n: a for n, a in all_actions.items() if "hidden" not in anns.get(n, {})}
    counters_all, meters_all = in_p4c_order(prog.counters), in_p4c_order(prog.meters)
    owned = {id(o) for t in tables.values() for o in (t.direct_counter, t.direct_meter) if o is not None}
    # a direct counter/meter reaches P4Info through the table that owns it (p4c: table properties)
    direct_counters = {n: c for n, c in counters_all.items() if c.direct and id(c) in owned}
    counters = {n: c for n, c in counters_all.items() if not c.direct}
    direct_meters = {n: m for n, m in meters_all.items() if m.direct and id(m) in owned}
    meters = {n: m for n, m in meters_all.items() if not m.direct}
    digests: dict[str, list[tuple[str, int]]] = {}
    for lay in prog.digest_layouts:
        digests.setdefault(lay.receiver_name, lay.fields)
    headers = cp.controller_headers     # header type name -> (@controller_header name, fields)
    profiles, registers = in_p4c_order(prog.profiles), in_p4c_order(prog.registers)
    value_sets = in_p4c_order(prog.value_sets)

    sym = SymbolTable()
    groups: list[tuple[int, dict]] = [
        (TABLE, all_tables), (ACTION, all_actions), (ACTION_PROFILE, profiles), (COUNTER, counters),
        (DIRECT_COUNTER, direct_counters), (METER, meters), (DIRECT_METER, direct_meters),
        (REGISTER, registers), (VALUE_SET, value_sets), (DIGEST, digests),
        (CONTROLLER_HEADER, headers)]
    for prefix, objs in groups:
        for name in objs:
            a = {} if prefix in (DIGEST, CONTROLLER_HEADER) else anns.get(name, {})
            sym.add(prefix, name, _at_id(a, name), name)
    sym.assign_ids()
    alias = sym.aliases()

    info = P4Info()
    info.pkg_info.arch = "v1model"

    def pre(msg: Any, prefix: int, name: str) -> None:
        msg.id, msg.name, msg.alias = sym.id(prefix, name), name, alias[name]
        if prefix not in (DIGEST, CONTROLLER_HEADER):
            msg.annotations.extend(annotation_strings(anns.get(name, {})))

    for name, t in tables.items():
        m = info.tables.add()
        pre(m.preamble, TABLE, name)
        for i, k in enumerate(t.keys, 1):
            mf = m.match_fields.add()
            mf.id, mf.name, mf.bitwidth, mf.match_type = i, k.name, k.width, _MATCH[k.kind]
            if (name, k.name) in cp.type_names:
                mf.type_name.name = cp.type_names[(name, k.name)]
        for a in t.actions:
            ref = m.action_refs.add()
            ref.id = sym.id(ACTION, a)
            # p4c: the scope and annotations come from the reference in the table's list (not the declaration);
            # a table without default_action gets p4c's implicit `@defaultonly NoAction`
            ref_anns = {"defaultonly": []} if cp.implicit_actions.get(name) == a else \
                cp.action_ref_annotations.get((name, a), {})
            ref.annotations.extend(annotation_strings(ref_anns))
            if "tableonly" in ref_anns:
                ref.scope = _TABLE_ONLY
            elif "defaultonly" in ref_anns:
                ref.scope = _DEFAULT_ONLY
        if t.const_default and t.default_action is not None:
            m.const_default_action_id = sym.id(ACTION, t.default_action.name)
            m.initial_default_action.action_id = m.const_default_action_id
            for i, ((_, width), value) in enumerate(zip(t.default_action.params, t.default_data, strict=True), 1):
                arg = m.initial_default_action.arguments.add()
                arg.param_id, arg.value = i, value.to_bytes((width + 7) // 8, "big")
        if t.profile is not None:
            m.implementation_id = sym.id(ACTION_PROFILE, t.profile.name)
        if t.direct_counter is not None:
            m.direct_resource_ids.append(sym.id(DIRECT_COUNTER, t.direct_counter.name))
        if t.direct_meter is not None:
            m.direct_resource_ids.append(sym.id(DIRECT_METER, t.direct_meter.name))
        m.size = t.size
        if name in cp.timeout_tables:
            m.idle_timeout_behavior = _NOTIFY_CONTROL
        if t.const_entries:
            m.is_const_table = True
        if t.entries:
            m.has_initial_entries = True
    for name, spec in actions.items():
        m = info.actions.add()
        pre(m.preamble, ACTION, name)
        for i, (pname, width) in enumerate(spec.params, 1):
            p = m.params.add()
            p.id, p.name, p.bitwidth = i, pname, width
            if (name, pname) in cp.type_names:
                p.type_name.name = cp.type_names[(name, pname)]
    for name, prof in profiles.items():
        m = info.action_profiles.add()
        pre(m.preamble, ACTION_PROFILE, name)
        m.table_ids.extend(sym.id(TABLE, t.name) for t in prof.tables if t.name in tables)
        m.with_selector = prof.algo is not None
        m.size = prof.size
        mgs = anns.get(name, {}).get("max_group_size")
        if mgs and isinstance(mgs[0], int):
            m.max_group_size = mgs[0]
    for name, c in counters.items():
        m = info.counters.add()
        pre(m.preamble, COUNTER, name)
        m.spec.unit = _COUNTER_UNIT[c.ctype]
        m.size = c.size
    for name, c in direct_counters.items():
        m = info.direct_counters.add()
        pre(m.preamble, DIRECT_COUNTER, name)
        m.spec.unit = _COUNTER_UNIT[c.ctype]
        m.direct_table_id = _owner(sym, tables, name, "direct_counter")
    for name, mt in meters.items():
        m = info.meters.add()
        pre(m.preamble, METER, name)
        m.spec.unit = _METER_UNIT[mt.mtype]
        m.size = mt.size
    for name, mt in direct_meters.items():
        m = info.direct_meters.add()
        pre(m.preamble, DIRECT_METER, name)
        m.spec.unit = _METER_UNIT[mt.mtype]
        m.direct_table_id = _owner(sym, tables, name, "direct_meter")
    for type_name, (cp_name, fields) in headers.items():
        # p4c: the id hashes the header type's name; the preamble carries the annotation's name as name and alias
        m = info.controller_packet_metadata.add()
        m.preamble.id, m.preamble.name, m.preamble.alias = sym.id(CONTROLLER_HEADER, type_name), cp_name, cp_name
        m.preamble.annotations.append(f'@controller_header("{cp_name}")')
        for i, (fname, width) in enumerate(fields, 1):
            md = m.metadata.add()
            md.id, md.name, md.bitwidth = i, fname, width
    for name, vs in value_sets.items():
        m = info.value_sets.add()
        pre(m.preamble, VALUE_SET, name)
        mf = m.match.add()
        mf.id, mf.bitwidth, mf.match_type = 1, vs.width, _MATCH["exact"]
        m.size = vs.size
    for name, r in registers.items():
        m = info.registers.add()
        pre(m.preamble, REGISTER, name)
        m.type_spec.CopyFrom(_bits(r.width, r.signed))
        m.size = r.size
    for name, fields in digests.items():
        m = info.digests.add()
        pre(m.preamble, DIGEST, name)
        m.type_spec.struct.name = name
        st = info.type_info.structs[name]
        for fname, width in fields:
            member = st.members.add()
            member.name = fname
            member.type_spec.CopyFrom(_bits(width))
    used_enums = {cp.type_names[k] for k in cp.type_names if k[0] in tables or k[0] in actions}
    for ename in sorted(used_enums):      # serializable enums used by a key or action parameter (p4c)
        width, members = cp.ser_enums[ename]
        spec = info.type_info.serializable_enums[ename]
        spec.underlying_type.bitwidth = width
        for mname, value in members:
            member = spec.members.add()
            member.name, member.value = mname, (value & ((1 << width) - 1)).to_bytes((width + 7) // 8, "big")
    info.type_info.SetInParent()          # p4c always writes type_info, empty or not
    return info


def _owner(sym: SymbolTable, tables: dict, name: str, what: str) -> int:
    """Id of the table a direct counter/meter belongs to."""
    for tname, t in tables.items():
        obj = t.direct_counter if what == "direct_counter" else t.direct_meter
        if obj is not None and obj.name == name:
            return sym.id(TABLE, tname)
    raise AssertionError(f"{what} {name} has no table")       # only owned ones are listed


def check_outputs(spec: str) -> list[Path]:
    """``--p4runtime-files OUT[,OUT2]``: paths whose suffix names a format and whose folder exists."""
    out = []
    for item in spec.split(","):
        path = Path(item.strip())
        if not item.strip():
            raise P4Error(f"--p4runtime-files {spec!r}: empty file name")
        if path.suffix not in SUFFIXES:
            raise P4Error(f"--p4runtime-files {item}: unknown suffix {path.suffix or '(none)'!r} "
                          f"(allowed: {', '.join(SUFFIXES)})")
        if not path.parent.is_dir():
            raise P4Error(f"--p4runtime-files {item}: folder {path.parent} does not exist")
        out.append(path)
    return out


def serialize(info: Any, fmt: str) -> bytes:
    """One P4Info in protobuf text format, binary, or the protobuf JSON mapping."""
    if fmt == "text":          # with the two header lines p4c writes (tools use them to find the schema)
        return (TEXT_HEADER + text_format.MessageToString(info)).encode()
    if fmt == "binary":
        return info.SerializeToString()
    return (json_format.MessageToJson(info, indent=2) + "\n").encode()


def write_p4info(info: Any, paths: list[Path]) -> None:
    """Write the P4Info to every path in the format its suffix picks."""
    for path in paths:
        try:
            path.write_bytes(serialize(info, SUFFIXES[path.suffix]))
        except OSError as exc:
            raise P4Error(f"--p4runtime-files {path}: cannot write: {exc.strerror}") from None
