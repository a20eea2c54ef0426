"""Match-action tables at run time: entries, the lookup structures (dict, LPM levels, priority scan).

Lookup picks the fastest structure the key allows and is rebuilt on every change (changes are rare,
lookups happen per packet): all-exact -> one dict; one LPM field + exact -> dicts per prefix length,
longest first; anything with ternary/range/optional -> a scan in priority order (BMv2: lower wins).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from p4.errors import CommandError


@dataclass
class ActionSpec:
    """An action a table may run: its full name, compiled function and action-data parameters."""

    name: str
    fn: Callable[..., Any] | None      # bound when the program is instantiated
    params: list[tuple[str, int]]  # (name, width)
    index: int
    default_only: bool = False
    table_only: bool = False
    bound_fn: str | None = None    # the generated function that binds its directional arguments (table-bound)


@dataclass
class KeySpec:
    name: str
    kind: str  # exact | lpm | ternary | range | optional
    width: int


@dataclass
class Entry:
    """One table entry: per key field a match spec (value, second) - mask, prefix length or range end."""

    handle: int
    match: list[tuple[int, int]]
    action: ActionSpec | None          # None for indirect entries (member/group)
    data: tuple[int, ...]
    priority: int = 0
    packets: int = 0
    bytes: int = 0
    meter: Any = None
    fn: Any = None          # action.fn, cached at every rebuild for the data path
    member: int | None = None   # indirect tables (action profiles): the member ...
    group: int | None = None    # ... or the group (action selectors) this entry points to
    idle_timeout_ns: int = 0    # tables with support_timeout: the controller is told after this long unhit
    last_hit_us: int = 0        # ... the last hit (or the insertion), on the pipeline's clock
    idle_notified: bool = False  # ... told already (until the next hit)

    def matches(self, keys: tuple[int, ...], kinds: list[str]) -> bool:
        for k, (a, b), kind in zip(keys, self.match, kinds, strict=True):
            if kind == "range":
                if not a <= k <= b:
                    return False
            elif (k & b) != a:
                return False
        return True


@dataclass
class ValueSet:
    """A parser ``value_set``: (value, mask) pairs the control plane adds; select matches any of them."""

    name: str
    width: int
    size: int
    entries: list[tuple[int, int]] = field(default_factory=list)

    def add(self, value: int, mask: int | None = None) -> None:
        full = (1 << self.width) - 1
        mask = full if mask is None else mask
        if (value & mask, mask) in self.entries:
            return
        if len(self.entries) >= self.size:
            raise CommandError(f"value set {self.name} is full ({self.size} values)")
        self.entries.append((value & mask, mask))

    def remove(self, value: int, mask: int | None = None) -> None:
        full = (1 << self.width) - 1
        mask = full if mask is None else mask
        try:
            self.entries.remove((value & mask, mask))
        except ValueError:
            raise CommandError(f"value set {self.name} has no value {value:#x}&&&{mask:#x}") from None

    def match(self, key: int) -> bool:
        for v, m in self.entries:
            if key & m == v:
                return True
        return False


@dataclass
class ProfileMember:
    action: ActionSpec
    data: tuple[int, ...]


@dataclass
class ActionProfile:
    """``action_profile`` / ``action_selector``: members (action + data) and groups of members."""

    name: str
    size: int
    algo: str | None = None      # selectors only: hash algorithm and output width
    width: int = 0
    members: dict[int, ProfileMember] = field(default_factory=dict)
    groups: dict[int, list[int]] = field(default_factory=dict)
    tables: list[Any] = field(default_factory=list)
    _next_member: int = 0
    _next_group: int = 0

    def add_member(self, action: ActionSpec, data: tuple[int, ...]) -> int:
        if len(self.members) >= self.size:
            raise CommandError(f"action profile {self.name} is full ({self.size} members)")
        h = self._next_member
        self._next_member += 1
        self.members[h] = ProfileMember(action, data)
        return h

    def add_group(self) -> int:
        if self.algo is None:
            raise CommandError(f"{self.name} is an action_profile; groups need an action_selector")
        h = self._next_group
        self._next_group += 1
        self.groups[h] = []
        return h


@dataclass
class Table:
    """A P4 table's run-time half: entries, default action, and ``lookup(key)`` used by compiled code."""

    name: str
    keys: list[KeySpec]
    actions: dict[str, ActionSpec]
    size: int = 1024
    default_action: ActionSpec | None = None
    default_data: tuple[int, ...] = ()
    const_default: bool = False
    const_entries: bool = False
    entries: dict[int, Entry] = field(default_factory=dict)
    direct_counter: Any = None
    direct_meter: Any = None
    profile: Any = None
    meter_exec: Callable[[Any, int, float], int] | None = None   # direct meter: set by Program.instantiate
    support_timeout: bool = False     # ``support_timeout = true``: hits stamp their entry's last_hit_us
    _next_handle: int = 0

    def __post_init__(self) -> None:
        self.initial_default = (self.default_action, self.default_data)
        self._rebuild()

    # --- control-plane operations -------------------------------------------------------------------------
    def add(self, match: list[tuple[int, int]], action: ActionSpec, data: tuple[int, ...],
            priority: int = 0, *, const: bool = False) -> int:
        if self.const_entries and not const:
            raise CommandError(f"table {self.name} has const entries; cannot add entries at run time")
        if action.default_only:
            raise CommandError(f"action {action.name} is @defaultonly in table {self.name}")
        if len(self.entries) >= self.size:
            raise CommandError(f"table {self.name} is full ({self.size} entries)")
        needs_prio = any(k.kind in ("ternary", "range", "optional") for k in self.keys)
        for e in self.entries.values():
            if e.match == match and (not needs_prio or e.priority == priority):
                raise CommandError(f"duplicate entry in table {self.name} (handle {e.handle})")
        handle = self._next_handle
        self._next_handle += 1
        self.entries[handle] = Entry(handle, match, action, data, priority)
        self._rebuild()
        return handle

    def add_indirect(self, match: list[tuple[int, int]], *, member: int | None = None, group: int | None = None,
                     priority: int = 0) -> int:
        """Entry of a table with an action profile/selector: points at a member or a group."""
        prof = self.profile
        if prof is None:
            raise CommandError(f"table {self.name} is not indirect (no implementation = action_profile/selector)")
        if member is not None and member not in prof.members:
            raise CommandError(f"action profile {prof.name} has no member {member}")
        if group is not None and group not in prof.groups:
            raise CommandError(f"action profile {prof.name} has no group {group}")
        if len(self.entries) >= self.size:
            raise CommandError(f"table {self.name} is full ({self.size} entries)")
        handle = self._next_handle
        self._next_handle += 1
        self.entries[handle] = Entry(handle, match, None, (), priority, member=member, group=group)
        self._rebuild()
        return handle

    def delete(self, handle: int) -> None:
        if handle not in self.entries:
            raise CommandError(f"table {self.name} has no entry with handle {handle}")
        del self.entries[handle]
        if self.direct_meter is not None:          # its direct meter's configuration goes with it
            self.direct_meter.entry_rates.pop(handle, None)
        self._rebuild()

    def modify(self, handle: int, action: ActionSpec, data: tuple[int, ...]) -> None:
        e = self.entries.get(handle)
        if e is None:
            raise CommandError(f"table {self.name} has no entry with handle {handle}")
        e.action, e.data = action, data
        self._rebuild()

    def clear(self) -> None:
        self.entries.clear()
        self._rebuild()

    def set_default(self, action: ActionSpec, data: tuple[int, ...]) -> None:
        if self.const_default:
            raise CommandError(f"table {self.name} has a const default_action; it cannot be changed")
        if action.table_only:
            raise CommandError(f"action {action.name} is @tableonly in table {self.name}")
        self.default_action, self.default_data = action, data

    def reset_default(self) -> None:
        self.default_action, self.default_data = self.initial_default

    # --- data plane ---------------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        kinds = [k.kind for k in self.keys]
        self._kinds = kinds
        entries = list(self.entries.values())
        for e in entries:
            e.fn = e.action.fn if e.action is not None else None
        if not kinds:
            self.lookup = self._lookup_none
        elif all(k == "exact" for k in kinds):
            single = len(kinds) == 1
            self._exact = {(e.match[0][0] if single else tuple(m[0] for m in e.match)): e for e in entries}
            self.lookup = self._exact.get
        elif kinds.count("lpm") == 1 and all(k in ("exact", "lpm") for k in kinds):
            li = kinds.index("lpm")
            levels: dict[int, dict] = {}
            single = len(kinds) == 1
            for e in entries:
                mask = e.match[li][1]
                d = levels.setdefault(mask, {})
                key = e.match[0][0] if single else tuple(m[0] for m in e.match)
                d.setdefault(key, e)
            order = sorted(levels, key=lambda m: -bin(m).count("1"))
            self._levels = [(m, levels[m]) for m in order]
            self._li = li
            self.lookup = self._lookup_lpm1 if single else self._lookup_lpm
        else:
            def prio(e: Entry) -> tuple[int, int]:
                if "lpm" in kinds and not any(k in ("ternary", "range", "optional") for k in kinds):
                    return (-bin(e.match[kinds.index("lpm")][1]).count("1"), e.handle)
                return (e.priority, e.handle)
            self._scan = sorted(entries, key=prio)
            self.lookup = self._lookup_scan

    def _lookup_none(self, key: Any) -> Entry | None:
        return None

    def _lookup_lpm1(self, key: int) -> Entry | None:
        for mask, d in self._levels:
            e = d.get(key & mask)
            if e is not None:
                return e
        return None

    def _lookup_lpm(self, key: tuple[int, ...]) -> Entry | None:
        li = self._li
        for mask, d in self._levels:
            k = list(key)
            k[li] &= mask
            e = d.get(tuple(k))
            if e is not None:
                return e
        return None

    def _lookup_scan(self, key: Any) -> Entry | None:
        keys = key if isinstance(key, tuple) else (key,)
        kinds = self._kinds
        for e in self._scan:
            if e.matches(keys, kinds):
                return e
        return None
