"""The simple_switch_CLI command language over a ``Pipeline`` (table_add, register_read, mc_*, ...).

``RuntimeCLI(pipeline).execute(line)`` returns the text BMv2's CLI would print (close to it); errors raise
``CommandError`` naming the command, the bad value and what is allowed.  The same command files work
offline (``starpulse p4 sim --commands``) and, later, over the switch's control socket.
"""

from __future__ import annotations

import ipaddress
import math
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from p4.errors import CommandError, NotText, utf8_text
from p4.pipeline import Pipeline
from p4.program import DROP_PORT, set_direct_meter_rates
from p4.tables import ActionProfile, ActionSpec, Table, ValueSet

COMMANDS_HELP = {
    "table_add": "table_add TABLE ACTION MATCH... => DATA... [PRIORITY]",
    "table_delete": "table_delete TABLE HANDLE",
    "table_modify": "table_modify TABLE ACTION HANDLE DATA...",
    "table_set_default": "table_set_default TABLE ACTION DATA...",
    "table_reset_default": "table_reset_default TABLE",
    "table_clear": "table_clear TABLE",
    "table_dump": "table_dump TABLE",
    "table_num_entries": "table_num_entries TABLE",
    "table_info": "table_info TABLE",
    "show_tables": "show_tables",
    "show_actions": "show_actions",
    "act_prof_create_member": "act_prof_create_member PROFILE ACTION DATA...",
    "act_prof_delete_member": "act_prof_delete_member PROFILE MEMBER",
    "act_prof_create_group": "act_prof_create_group PROFILE",
    "act_prof_delete_group": "act_prof_delete_group PROFILE GROUP",
    "act_prof_add_member_to_group": "act_prof_add_member_to_group PROFILE MEMBER GROUP",
    "act_prof_remove_member_from_group": "act_prof_remove_member_from_group PROFILE MEMBER GROUP",
    "table_indirect_add": "table_indirect_add TABLE MATCH... => MEMBER [PRIORITY]",
    "table_indirect_add_with_group": "table_indirect_add_with_group TABLE MATCH... => GROUP [PRIORITY]",
    "table_indirect_delete": "table_indirect_delete TABLE HANDLE",
    "pvs_add": "pvs_add VALUE_SET VALUE[&&&MASK]",
    "pvs_remove": "pvs_remove VALUE_SET VALUE[&&&MASK]",
    "pvs_get": "pvs_get VALUE_SET",
    "pvs_clear": "pvs_clear VALUE_SET",
    "register_read": "register_read REGISTER [INDEX]",
    "register_write": "register_write REGISTER INDEX VALUE",
    "register_reset": "register_reset REGISTER",
    "counter_read": "counter_read COUNTER INDEX (direct counters: entry HANDLE)",
    "counter_reset": "counter_reset COUNTER",
    "counter_write": "counter_write COUNTER INDEX PACKETS BYTES (direct counters: entry HANDLE)",
    "meter_array_set_rates": "meter_array_set_rates METER CIR:CBS PIR:PBS (rates per microsecond)",
    "meter_set_rates": "meter_set_rates METER INDEX CIR:CBS PIR:PBS",
    "mirroring_add": "mirroring_add SESSION PORT",
    "mirroring_delete": "mirroring_delete SESSION",
    "mc_mgrp_create": "mc_mgrp_create GROUP",
    "mc_mgrp_destroy": "mc_mgrp_destroy GROUP",
    "mc_node_create": "mc_node_create RID PORT...",
    "mc_node_update": "mc_node_update HANDLE PORT...",
    "mc_node_destroy": "mc_node_destroy HANDLE",
    "mc_node_associate": "mc_node_associate GROUP HANDLE",
    "mc_node_dissociate": "mc_node_dissociate GROUP HANDLE",
    "mc_dump": "mc_dump",
    "set_queue_depth": "set_queue_depth DEPTH_PKTS [EGRESS_PORT [PRIORITY]]",
    "set_queue_rate": "set_queue_rate RATE_PPS [EGRESS_PORT [PRIORITY]]",
    "reset_state": "reset_state",
    "help": "help [COMMAND]",
}


def parse_value(text: str, width: int, what: str) -> int:
    """A CLI value: decimal, 0x hex, 0b binary, IPv4 dotted quad, IPv6, or MAC aa:bb:cc:dd:ee:ff."""
    t = text.strip()
    try:
        if t.count(".") == 3 and all(p.isdigit() for p in t.split(".")):
            v = int(ipaddress.IPv4Address(t))
        elif t.count(":") == 5 and all(len(p) <= 2 for p in t.split(":")):
            v = int(t.replace(":", ""), 16)
        elif ":" in t:
            v = int(ipaddress.IPv6Address(t))
        else:
            neg = t.startswith("-")
            v = int(t, 0)
            if neg:
                v &= (1 << width) - 1
    except ValueError:
        raise CommandError(f"{what}: cannot parse {text!r} (expected a number, 0x hex, IPv4/IPv6 address "
                           "or MAC address)") from None
    if v >> width:
        raise CommandError(f"{what}: value {text} does not fit in {width} bits")
    return v


def read_command_file(path: str | Path, flag: str = "--commands") -> list[str]:
    """The lines of a command file; a directory, an unreadable, binary or non-UTF-8 file is one CommandError."""
    p = Path(path)
    if p.is_dir():
        raise CommandError(f"{flag} {path}: is a directory, not a command file")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise CommandError(f"{flag} {path}: cannot read it: {exc.strerror or exc}") from None
    return command_lines(data, str(path))


def command_lines(data: bytes, name: str) -> list[str]:
    """Decode command text (UTF-8, no NUL bytes) into lines; errors name ``name:line``."""
    try:
        return utf8_text(data).splitlines()
    except NotText as exc:
        line = data.count(b"\n", 0, exc.offset) + 1
        raise CommandError(f"{name}:{line}: {exc.what}; command files are UTF-8 text") from None


def finite_float(text: str, what: str) -> float:
    """A finite number (no nan/inf), else a CommandError naming ``what``."""
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        raise CommandError(f"{what}: expected a finite number, not {text!r}")
    return v


T = TypeVar("T")


class RuntimeCLI:
    """Executes simple_switch_CLI commands against one pipeline."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        self.program = pipeline.program
        self.state = pipeline.state          # this pipeline's tables/externs (never the Program's templates)
        self._handlers: dict[str, Callable[[list[str]], str]] = {
            name: getattr(self, "_" + name) for name in COMMANDS_HELP
        }

    # --- entry points -------------------------------------------------------------------------------------
    def execute(self, line: str) -> str:
        """Run one command line; returns its output text ('' for none)."""
        line = line.strip()
        if not line or line.startswith("#"):
            return ""
        try:
            words = shlex.split(line, comments=True)
        except ValueError as exc:
            raise CommandError(f"cannot split command line: {exc}") from None
        if not words:
            return ""
        cmd, args = words[0], words[1:]
        handler = self._handlers.get(cmd)
        if handler is None:
            raise CommandError(f"unknown command {cmd!r} (try 'help'; known: {', '.join(sorted(COMMANDS_HELP))})")
        try:
            return handler(args)
        except CommandError as exc:
            if exc.message.startswith(cmd):
                raise
            raise CommandError(f"{cmd}: {exc.message}") from None
        except Exception as exc:  # a bad command must never take the switch down
            raise CommandError(f"{cmd}: failed ({type(exc).__name__}: {exc}); usage: "
                               f"{COMMANDS_HELP.get(cmd, cmd)}") from None

    def run_file(self, path: str | Path) -> list[str]:
        """Run every line of a command file; errors name the file and line."""
        outputs = []
        for lineno, line in enumerate(read_command_file(path), 1):
            try:
                out = self.execute(line)
            except CommandError as exc:
                raise CommandError(f"{path}:{lineno}: {exc.message}") from None
            if out:
                outputs.append(out)
        return outputs

    def completions(self, line: str) -> list[str]:
        """Candidates for the last word of ``line`` (commands, then table/action/extern names)."""
        words = line.split()
        if line.endswith(" "):
            words.append("")
        if len(words) <= 1:
            prefix = words[0] if words else ""
            return sorted(c for c in COMMANDS_HELP if c.startswith(prefix))
        cmd, prefix = words[0], words[-1]
        prog = self.state
        if cmd.startswith("table_") and len(words) == 2:
            names = list(prog.tables)
        elif cmd in ("table_add", "table_set_default", "table_modify") and len(words) == 3:
            t = prog.tables.get(words[1])
            names = list(t.actions) if t is not None else list(prog.actions)
        elif cmd.startswith("register_") and len(words) == 2:
            names = list(prog.registers)
        elif cmd.startswith("counter_") and len(words) == 2:
            names = list(prog.counters)
        elif cmd.startswith("meter_") and len(words) == 2:
            names = list(prog.meters)
        else:
            names = []
        return sorted(n for n in names if n.startswith(prefix))

    # --- lookups ------------------------------------------------------------------------------------------
    def _find(self, kind: str, name: str, objs: dict[str, T]) -> T:
        if name in objs:
            return objs[name]
        hits = [v for k, v in objs.items() if k.split(".")[-1] == name or k.endswith("." + name)]
        if len(hits) == 1:
            return hits[0]
        known = ", ".join(sorted(objs)) or "none"
        if len(hits) > 1:
            raise CommandError(f"{kind} name {name!r} is ambiguous; use the full name ({known})")
        raise CommandError(f"unknown {kind} {name!r} (known: {known})")

    def table(self, name: str) -> Table:
        return self._find("table", name, self.state.tables)

    def action(self, table: Table, name: str) -> ActionSpec:
        if name in table.actions:
            return table.actions[name]
        hits = [a for k, a in table.actions.items() if k.split(".")[-1] == name]
        if len(hits) == 1:
            return hits[0]
        raise CommandError(f"table {table.name} has no action {name!r} (actions: {', '.join(table.actions)})")

    def _data(self, action: ActionSpec, words: list[str]) -> tuple[int, ...]:
        if len(words) != len(action.params):
            want = " ".join(f"{n}:bit<{w}>" for n, w in action.params) or "no data"
            raise CommandError(f"action {action.name} takes {len(action.params)} data values ({want}), "
                               f"got {len(words)}")
        return tuple(parse_value(w, width, f"action data {n}") for w, (n, width) in
                     zip(words, action.params, strict=True))

    def _int(self, text: str, what: str) -> int:
        try:
            return int(text, 0)
        except ValueError:
            raise CommandError(f"{what} must be an integer, not {text!r}") from None

    def _port(self, text: str, what: str = "port") -> int:
        """A switch port: 0..510 (511 is v1model's drop port, as in BMv2 simple_switch)."""
        port = self._int(text, what)
        if not 0 <= port < DROP_PORT:
            raise CommandError(f"{what} {text}: allowed 0..{DROP_PORT - 1}")
        return port

    def _nargs(self, args: list[str], n: int | tuple[int, int], cmd: str) -> None:
        lo, hi = (n, n) if isinstance(n, int) else n
        if not lo <= len(args) <= hi:
            raise CommandError(f"{cmd}: wrong number of arguments; usage: {COMMANDS_HELP[cmd]}")

    # --- tables -------------------------------------------------------------------------------------------
    def _table_add(self, args: list[str]) -> str:
        if len(args) < 2:
            raise CommandError(f"table_add: usage: {COMMANDS_HELP['table_add']}")
        table = self.table(args[0])
        action = self.action(table, args[1])
        rest = args[2:]
        if "=>" in rest:
            i = rest.index("=>")
            match_words, data_words = rest[:i], rest[i + 1 :]
        else:
            match_words, data_words = rest, []
        needs_prio = any(k.kind in ("ternary", "range", "optional") for k in table.keys)
        priority = 0
        if needs_prio:
            if len(data_words) == len(action.params) + 1:
                priority = self._int(data_words[-1], "priority")
                data_words = data_words[:-1]
            else:
                raise CommandError(f"table {table.name} has ternary/range/optional keys: give a priority "
                                   "after the action data (lower value wins, as in BMv2)")
        if len(match_words) != len(table.keys):
            want = " ".join(f"{k.name}:{k.kind}" for k in table.keys)
            raise CommandError(f"table {table.name} needs {len(table.keys)} match values ({want}), "
                               f"got {len(match_words)}")
        match = [self._match(w, k.kind, k.width, k.name) for w, k in zip(match_words, table.keys, strict=True)]
        data = self._data(action, data_words)
        handle = table.add(match, action, data, priority)
        return f"Entry has been added with handle {handle}"

    def _match(self, word: str, kind: str, width: int, name: str) -> tuple[int, int]:
        full = (1 << width) - 1
        what = f"match field {name}"
        if kind == "exact":
            return (parse_value(word, width, what), full)
        if kind == "lpm":
            if "/" not in word:
                raise CommandError(f"{what} is lpm: expected VALUE/PREFIX_LEN, got {word!r}")
            v, plen_s = word.rsplit("/", 1)
            plen = self._int(plen_s, f"{what} prefix length")
            if not 0 <= plen <= width:
                raise CommandError(f"{what}: prefix length {plen} out of range 0..{width}")
            mask = (full >> (width - plen)) << (width - plen) if plen else 0
            return (parse_value(v, width, what) & mask, mask)
        if kind == "ternary":
            if "&&&" not in word:
                raise CommandError(f"{what} is ternary: expected VALUE&&&MASK, got {word!r}")
            v, m = word.split("&&&", 1)
            mask = parse_value(m, width, what)
            return (parse_value(v, width, what) & mask, mask)
        if kind == "range":
            if "->" not in word:
                raise CommandError(f"{what} is range: expected LOW->HIGH, got {word!r}")
            lo, hi = word.split("->", 1)
            return (parse_value(lo, width, what), parse_value(hi, width, what))
        if kind == "optional":
            if word in ("*", "_"):
                return (0, 0)
            return (parse_value(word, width, what), full)
        raise CommandError(f"{what}: unsupported match kind {kind}")

    def _table_delete(self, args: list[str]) -> str:
        self._nargs(args, 2, "table_delete")
        self.table(args[0]).delete(self._int(args[1], "entry handle"))
        return ""

    def _table_modify(self, args: list[str]) -> str:
        if len(args) < 3:
            raise CommandError(f"table_modify: usage: {COMMANDS_HELP['table_modify']}")
        table = self.table(args[0])
        action = self.action(table, args[1])
        data_words = [w for w in args[3:] if w != "=>"]
        table.modify(self._int(args[2], "entry handle"), action, self._data(action, data_words))
        return ""

    def _table_set_default(self, args: list[str]) -> str:
        if len(args) < 2:
            raise CommandError(f"table_set_default: usage: {COMMANDS_HELP['table_set_default']}")
        table = self.table(args[0])
        action = self.action(table, args[1])
        data_words = [w for w in args[2:] if w != "=>"]
        table.set_default(action, self._data(action, data_words))
        return ""

    def _table_reset_default(self, args: list[str]) -> str:
        self._nargs(args, 1, "table_reset_default")
        self.table(args[0]).reset_default()
        return ""

    def _table_clear(self, args: list[str]) -> str:
        self._nargs(args, 1, "table_clear")
        self.table(args[0]).clear()
        return ""

    def _table_num_entries(self, args: list[str]) -> str:
        self._nargs(args, 1, "table_num_entries")
        return str(len(self.table(args[0]).entries))

    def _table_dump(self, args: list[str]) -> str:
        self._nargs(args, 1, "table_dump")
        t = self.table(args[0])
        lines = ["==========", f"TABLE ENTRIES ({t.name})"]
        for e in sorted(t.entries.values(), key=lambda e: e.handle):
            lines.append("**********")
            lines.append(f"Dumping entry 0x{e.handle:x}")
            lines.append("Match key:")
            for k, (a, b) in zip(t.keys, e.match, strict=True):
                digits = (k.width + 3) // 4
                if k.kind == "exact":
                    lines.append(f"* {k.name:<20}: EXACT     {a:0{digits}x}")
                elif k.kind == "lpm":
                    lines.append(f"* {k.name:<20}: LPM       {a:0{digits}x}/{bin(b).count('1')}")
                elif k.kind == "range":
                    lines.append(f"* {k.name:<20}: RANGE     {a:0{digits}x} -> {b:0{digits}x}")
                else:
                    lines.append(f"* {k.name:<20}: {k.kind.upper():<9} {a:0{digits}x} &&& {b:0{digits}x}")
            if e.priority:
                lines.append(f"Priority: {e.priority}")
            if e.action is None:
                target = f"group {e.group}" if e.group is not None else f"member {e.member}"
                lines.append(f"Index: {target}")
            else:
                data = ", ".join(f"{v:x}" for v in e.data)
                lines.append(f"Action entry: {e.action.name} - {data}")
        lines.append("==========")
        if t.default_action is not None:
            data = ", ".join(f"{v:x}" for v in t.default_data)
            lines.append(f"Dumping default entry\nAction entry: {t.default_action.name} - {data}")
        lines.append("==========")
        return "\n".join(lines)

    def _table_info(self, args: list[str]) -> str:
        self._nargs(args, 1, "table_info")
        t = self.table(args[0])
        keys = "\t".join(f"{k.name}({k.kind}, {k.width})" for k in t.keys)
        lines = [f"{t.name:<30} [size={t.size}, entries={len(t.entries)}]\t{keys}", "*" * 40]
        for a in t.actions.values():
            params = "\t".join(f"{n}({w})" for n, w in a.params)
            lines.append(f"{a.name:<30} [{params}]")
        return "\n".join(lines)

    def _show_tables(self, args: list[str]) -> str:
        out = []
        for t in self.state.tables.values():
            keys = "\t".join(f"{k.name}({k.kind}, {k.width})" for k in t.keys)
            out.append(f"{t.name:<30} [size={t.size}]\t{keys}")
        return "\n".join(out)

    def _show_actions(self, args: list[str]) -> str:
        return "\n".join(f"{a.name:<30} [{', '.join(f'{n}({w})' for n, w in a.params)}]"
                         for a in self.state.actions.values())

    # --- action profiles and selectors (indirect tables) ------------------------------------------------
    def profile(self, name: str) -> ActionProfile:
        return self._find("action profile", name, self.state.profiles)

    def _profile_action(self, prof: ActionProfile, name: str) -> ActionSpec:
        for t in prof.tables:
            try:
                return self.action(t, name)
            except CommandError:
                continue
        raise CommandError(f"no table using {prof.name} has action {name!r}")

    def _act_prof_create_member(self, args: list[str]) -> str:
        if len(args) < 2:
            raise CommandError(f"act_prof_create_member: usage: {COMMANDS_HELP['act_prof_create_member']}")
        prof = self.profile(args[0])
        action = self._profile_action(prof, args[1])
        h = prof.add_member(action, self._data(action, [w for w in args[2:] if w != "=>"]))
        return f"Member has been created with handle {h}"

    def _act_prof_delete_member(self, args: list[str]) -> str:
        self._nargs(args, 2, "act_prof_delete_member")
        prof = self.profile(args[0])
        h = self._int(args[1], "member handle")
        if h not in prof.members:
            raise CommandError(f"{prof.name} has no member {h}")
        if any(h in g for g in prof.groups.values()) or any(
                e.member == h for t in prof.tables for e in t.entries.values()):
            raise CommandError(f"member {h} of {prof.name} is still in use")
        del prof.members[h]
        return ""

    def _act_prof_create_group(self, args: list[str]) -> str:
        self._nargs(args, 1, "act_prof_create_group")
        return f"Group has been created with handle {self.profile(args[0]).add_group()}"

    def _act_prof_delete_group(self, args: list[str]) -> str:
        self._nargs(args, 2, "act_prof_delete_group")
        prof = self.profile(args[0])
        if prof.groups.pop(self._int(args[1], "group handle"), None) is None:
            raise CommandError(f"{prof.name} has no group {args[1]}")
        return ""

    def _group_member(self, args: list[str], cmd: str) -> tuple[ActionProfile, int, int]:
        self._nargs(args, 3, cmd)
        prof = self.profile(args[0])
        m, g = self._int(args[1], "member handle"), self._int(args[2], "group handle")
        if m not in prof.members:
            raise CommandError(f"{prof.name} has no member {m}")
        if g not in prof.groups:
            raise CommandError(f"{prof.name} has no group {g}")
        return prof, m, g

    def _act_prof_add_member_to_group(self, args: list[str]) -> str:
        prof, m, g = self._group_member(args, "act_prof_add_member_to_group")
        if m not in prof.groups[g]:
            prof.groups[g].append(m)
        return ""

    def _act_prof_remove_member_from_group(self, args: list[str]) -> str:
        prof, m, g = self._group_member(args, "act_prof_remove_member_from_group")
        if m not in prof.groups[g]:
            raise CommandError(f"member {m} is not in group {g}")
        prof.groups[g].remove(m)
        return ""

    def _indirect_add(self, args: list[str], cmd: str, group: bool) -> str:
        if "=>" not in args or len(args) < 3:
            raise CommandError(f"{cmd}: usage: {COMMANDS_HELP[cmd]}")
        table = self.table(args[0])
        i = args.index("=>")
        match_words, rest = args[1:i], args[i + 1 :]
        if len(match_words) != len(table.keys):
            raise CommandError(f"table {table.name} needs {len(table.keys)} match values, got {len(match_words)}")
        if len(rest) not in (1, 2):
            raise CommandError(f"{cmd}: expected one {'group' if group else 'member'} handle after =>")
        match = [self._match(w, k.kind, k.width, k.name) for w, k in zip(match_words, table.keys, strict=True)]
        handle = self._int(rest[0], "group handle" if group else "member handle")
        prio = self._int(rest[1], "priority") if len(rest) == 2 else 0
        if group:
            h = table.add_indirect(match, group=handle, priority=prio)
        else:
            h = table.add_indirect(match, member=handle, priority=prio)
        return f"Entry has been added with handle {h}"

    def _table_indirect_add(self, args: list[str]) -> str:
        return self._indirect_add(args, "table_indirect_add", group=False)

    def _table_indirect_add_with_group(self, args: list[str]) -> str:
        return self._indirect_add(args, "table_indirect_add_with_group", group=True)

    def _table_indirect_delete(self, args: list[str]) -> str:
        self._nargs(args, 2, "table_indirect_delete")
        self.table(args[0]).delete(self._int(args[1], "entry handle"))
        return ""

    # --- parser value sets -----------------------------------------------------------------------------------
    def _pvs_value(self, args: list[str], cmd: str) -> tuple[ValueSet, int, int | None]:
        self._nargs(args, 2, cmd)
        vs = self._find("value set", args[0], self.state.value_sets)
        v, _, m = args[1].partition("&&&")
        value = parse_value(v, vs.width, f"value set {vs.name}")
        mask = parse_value(m, vs.width, f"value set {vs.name} mask") if m else None
        return vs, value, mask

    def _pvs_add(self, args: list[str]) -> str:
        vs, value, mask = self._pvs_value(args, "pvs_add")
        vs.add(value, mask)
        return ""

    def _pvs_remove(self, args: list[str]) -> str:
        vs, value, mask = self._pvs_value(args, "pvs_remove")
        vs.remove(value, mask)
        return ""

    def _pvs_get(self, args: list[str]) -> str:
        self._nargs(args, 1, "pvs_get")
        vs = self._find("value set", args[0], self.state.value_sets)
        return "\n".join(f"{v:#x}&&&{m:#x}" for v, m in vs.entries)

    def _pvs_clear(self, args: list[str]) -> str:
        self._nargs(args, 1, "pvs_clear")
        self._find("value set", args[0], self.state.value_sets).entries.clear()
        return ""

    # --- stateful externs ---------------------------------------------------------------------------------
    def _register_read(self, args: list[str]) -> str:
        self._nargs(args, (1, 2), "register_read")
        r = self._find("register", args[0], self.state.registers)
        if len(args) == 1:
            return f"{r.name}= " + ", ".join(str(v) for v in r.values)
        i = self._index(args[1], r.size, r.name)
        return f"{r.name}[{i}]= {r.values[i]}"

    def _index(self, text: str, size: int, name: str) -> int:
        i = self._int(text, "index")
        if not 0 <= i < size:
            raise CommandError(f"index {i} out of range for {name} (size {size})")
        return i

    def _register_write(self, args: list[str]) -> str:
        self._nargs(args, 3, "register_write")
        r = self._find("register", args[0], self.state.registers)
        i = self._index(args[1], r.size, r.name)
        v = parse_value(args[2], r.width, f"register {r.name} value")
        if r.signed and v >> (r.width - 1):
            v -= 1 << r.width
        r.values[i] = v
        return ""

    def _register_reset(self, args: list[str]) -> str:
        self._nargs(args, 1, "register_reset")
        self._find("register", args[0], self.state.registers).reset()
        return ""

    def _counter_read(self, args: list[str]) -> str:
        self._nargs(args, 2, "counter_read")
        c = self._find("counter", args[0], self.state.counters)
        if c.direct:
            h = self._int(args[1], "entry handle")
            for t in self.state.tables.values():
                if t.direct_counter is c and h in t.entries:
                    e = t.entries[h]
                    return f"{c.name}[{h}]=  BmCounterValue(packets={e.packets}, bytes={e.bytes})"
            raise CommandError(f"no entry with handle {h} in the table of direct counter {args[0]}")
        i = self._index(args[1], c.size, c.name)
        return f"{c.name}[{i}]=  BmCounterValue(packets={c.packets[i]}, bytes={c.bytes[i]})"

    def _counter_write(self, args: list[str]) -> str:
        """``counter_write COUNTER INDEX PACKETS BYTES``: set one cell (a direct counter's by entry handle)."""
        self._nargs(args, 4, "counter_write")
        c = self._find("counter", args[0], self.state.counters)
        packets, nbytes = self._int(args[2], "packet count"), self._int(args[3], "byte count")
        if packets < 0 or nbytes < 0:
            raise CommandError(f"counter_write: counts must be >= 0, got {packets} packets, {nbytes} bytes")
        if c.direct:
            h = self._int(args[1], "entry handle")
            for t in self.state.tables.values():
                if t.direct_counter is c and h in t.entries:
                    t.entries[h].packets, t.entries[h].bytes = packets, nbytes
                    return ""
            raise CommandError(f"no entry with handle {h} in the table of direct counter {args[0]}")
        i = self._index(args[1], c.size, c.name)
        c.packets[i], c.bytes[i] = packets, nbytes
        return ""

    def _counter_reset(self, args: list[str]) -> str:
        self._nargs(args, 1, "counter_reset")
        c = self._find("counter", args[0], self.state.counters)
        c.reset()
        for t in self.state.tables.values():
            if t.direct_counter is c:
                for e in t.entries.values():
                    e.packets = e.bytes = 0
        return ""

    def _rates(self, words: list[str]) -> list[tuple[float, int]]:
        out = []
        for w in words:
            if ":" not in w:
                raise CommandError(f"meter rate {w!r}: expected RATE:BURST (rate per microsecond)")
            r, b = w.split(":", 1)
            try:
                out.append((finite_float(r, f"meter rate {w!r}"), int(b)))
            except ValueError:
                raise CommandError(f"meter rate {w!r}: expected RATE:BURST, e.g. 0.5:10") from None
        return out

    def _meter_array_set_rates(self, args: list[str]) -> str:
        self._nargs(args, 3, "meter_array_set_rates")
        m = self._find("meter", args[0], self.state.meters)
        m.set_rates(None, self._rates(args[1:]))
        return ""

    def _meter_set_rates(self, args: list[str]) -> str:
        self._nargs(args, 4, "meter_set_rates")
        m = self._find("meter", args[0], self.state.meters)
        rates = self._rates(args[2:])
        if m.direct:
            set_direct_meter_rates(self.state.tables.values(), m, self._int(args[1], "entry handle"), rates)
            return ""
        m.set_rates(self._index(args[1], m.size, m.name), rates)
        return ""

    # --- PRE, mirroring, queues -----------------------------------------------------------------------------
    def _mirroring_add(self, args: list[str]) -> str:
        self._nargs(args, 2, "mirroring_add")
        sid = self._int(args[0], "session id")
        self.pipeline.mirror_sessions[sid] = self._port(args[1])
        self.pipeline.clone_options.pop(sid, None)      # the CLI's session has no class of service or truncation
        return ""

    def _mirroring_delete(self, args: list[str]) -> str:
        self._nargs(args, 1, "mirroring_delete")
        sid = self._int(args[0], "session id")
        if self.pipeline.mirror_sessions.pop(sid, None) is None:
            raise CommandError(f"mirroring session {args[0]} does not exist")
        self.pipeline.clone_options.pop(sid, None)
        return ""

    def _mc_mgrp_create(self, args: list[str]) -> str:
        self._nargs(args, 1, "mc_mgrp_create")
        g = self._int(args[0], "group id")
        self.pipeline.mc_group_create(g)
        return f"Creating multicast group {g}"

    def _mc_mgrp_destroy(self, args: list[str]) -> str:
        self._nargs(args, 1, "mc_mgrp_destroy")
        self.pipeline.mc_group_destroy(self._int(args[0], "group id"))
        return ""

    def _ports(self, words: list[str]) -> list[int]:
        return [self._port(w) for w in words]

    def _mc_node_create(self, args: list[str]) -> str:
        if len(args) < 1:
            raise CommandError(f"mc_node_create: usage: {COMMANDS_HELP['mc_node_create']}")
        h = self.pipeline.mc_node_create(self._int(args[0], "rid"), self._ports(args[1:]))
        return (f"Creating node with rid {args[0]} , port map {args[1:]} and lag map []\n"
                f"node was created with handle {h}")

    def _mc_node_update(self, args: list[str]) -> str:
        if len(args) < 1:
            raise CommandError(f"mc_node_update: usage: {COMMANDS_HELP['mc_node_update']}")
        self.pipeline.mc_node_update(self._int(args[0], "node handle"), self._ports(args[1:]))
        return ""

    def _mc_node_destroy(self, args: list[str]) -> str:
        self._nargs(args, 1, "mc_node_destroy")
        self.pipeline.mc_node_destroy(self._int(args[0], "node handle"))
        return ""

    def _mc_node_associate(self, args: list[str]) -> str:
        self._nargs(args, 2, "mc_node_associate")
        self.pipeline.mc_node_associate(self._int(args[0], "group id"), self._int(args[1], "node handle"))
        return f"Associating node {args[1]} to multicast group {args[0]}"

    def _mc_node_dissociate(self, args: list[str]) -> str:
        self._nargs(args, 2, "mc_node_dissociate")
        self.pipeline.mc_node_dissociate(self._int(args[0], "group id"), self._int(args[1], "node handle"))
        return ""

    def _mc_dump(self, args: list[str]) -> str:
        lines = ["==========", "MC ENTRIES"]
        for g, nodes in sorted(self.pipeline.mc_groups.items()):
            lines.append(f"**********\nmgrp({g})")
            for h in nodes:
                n = self.pipeline.mc_nodes[h]
                lines.append(f"  -> (L1h={h}, rid={n.rid}) -> (ports=[{', '.join(map(str, n.ports))}], lags=[])")
        lines.append("==========")
        return "\n".join(lines)

    def _set_queue_depth(self, args: list[str]) -> str:
        self._nargs(args, (1, 3), "set_queue_depth")
        port = self._port(args[1], "egress port") if len(args) >= 2 else None
        depth = self._int(args[0], "queue depth")
        if depth < 1:
            raise CommandError(f"set_queue_depth: depth must be >= 1 packet, not {depth}")
        if len(args) == 3:
            self.pipeline.queue_depth_pkts_prio[(port, self._int(args[2], "priority"))] = depth
        else:
            self.pipeline.queue_depth_pkts[port] = depth
        return ""

    def _set_queue_rate(self, args: list[str]) -> str:
        self._nargs(args, (1, 3), "set_queue_rate")
        port = self._port(args[1], "egress port") if len(args) >= 2 else None
        rate = finite_float(args[0], "set_queue_rate: rate in packets per second")
        if rate < 0:
            raise CommandError(f"set_queue_rate: rate must be >= 0 packets per second, not {args[0]}")
        if len(args) == 3:
            self.pipeline.queue_rate_pps_prio[(port, self._int(args[2], "priority"))] = rate
        else:
            self.pipeline.queue_rate_pps[port] = rate
        return ""

    def _reset_state(self, args: list[str]) -> str:
        for t in self.state.tables.values():
            if not t.const_entries:
                t.clear()
            t.reset_default()
        for r in self.state.registers.values():
            r.reset()
        for c in self.state.counters.values():
            c.reset()
        return ""

    def _help(self, args: list[str]) -> str:
        if args:
            if args[0] not in COMMANDS_HELP:
                raise CommandError(f"help: unknown command {args[0]!r}")
            return COMMANDS_HELP[args[0]]
        return "\n".join(COMMANDS_HELP.values())
