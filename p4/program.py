"""The compiled form of a v1model program (generated code + pristine state) and its per-pipeline instances.

A ``Program`` is compiled once and never runs packets itself: ``instantiate()`` gives each pipeline its own
tables, registers, counters, meters, profiles and value sets (copies of the compiled ones, const entries
included) and binds the generated stage functions to them by executing the compiled code object in a fresh
namespace (function definitions only, no re-compilation), so two pipelines never share run-time state.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from p4.externs import Counter, Meter, Register
from p4.tables import ActionProfile, ActionSpec, Table, ValueSet

# Hidden per-packet slots at the start of the state list S (before headers and metadata).
PAYLOAD, DIGESTS, CLONE_SESSION, CLONE_FL, RESUBMIT_FL, RECIRC_FL, TRUNCATE, LOGS = range(8)
N_HIDDEN = 8
NO_FIELD_LIST = -1

# standard_metadata.instance_type values of BMv2 simple_switch.
PKT_NORMAL, PKT_INGRESS_CLONE, PKT_EGRESS_CLONE, PKT_COALESCED = 0, 1, 2, 3
PKT_RECIRC, PKT_REPLICATION, PKT_RESUBMIT = 4, 5, 6
DROP_PORT = 511


class ParserError(Exception):
    """Raised inside the generated parser; ``code`` is the P4 error's number."""

    def __init__(self, code: int) -> None:
        self.code = code


class StackIndexOutOfRange(ParserError):
    """A run-time header stack index out of range in a control.  The statement that used it takes its
    out-of-range branch, as p4c's BMv2 back end lowers it (``p4.compiler.statements``); where none exists the
    packet is dropped like a parser error."""


class ExitControl(Exception):
    """``exit`` statement: leaves the current control block."""


class ReturnControl(Exception):
    """``return`` in a control's apply block: leaves that control (and only that one)."""


class AssertFailed(Exception):
    """A v1model ``assert``/``assume`` failed (BMv2 would abort; we drop the packet and count it)."""


@dataclass
class DigestLayout:
    """How to turn digest slot values into named fields for the caller."""

    receiver_name: str
    fields: list[tuple[str, int]]  # (name, width)


@dataclass
class ControlPlaneFacts:
    """What P4Info needs beyond the run-time objects: annotations by control-plane name (``@id``, ``@name`` ...),
    ``@controller_header`` header types, tables with ``support_timeout = true``, defaults the compiler added."""

    annotations: dict[str, dict[str, list]] = field(default_factory=dict)
    controller_headers: dict[str, tuple[str, list[tuple[str, int]]]] = field(default_factory=dict)
    timeout_tables: set[str] = field(default_factory=set)
    implicit_actions: dict[str, str] = field(default_factory=dict)   # table -> NoAction we added as default
    block_order: list[str] = field(default_factory=list)   # V1Switch arguments (parser ... deparser) in order
    action_ref_annotations: dict[tuple[str, str], dict[str, list]] = field(default_factory=dict)  # (table, action)
    type_names: dict[tuple[str, str], str] = field(default_factory=dict)   # (table, key) / (action, param) -> enum
    ser_enums: dict[str, tuple[int, list[tuple[str, int]]]] = field(default_factory=dict)  # name -> (width, members)


@dataclass
class ProgramState:
    """The run-time objects of one instance, by control-plane name; ``objects`` are the same objects under the
    generated code's global names (one object graph, so a table's direct counter is ``counters[...]``)."""

    tables: dict[str, Table] = field(default_factory=dict)
    actions: dict[str, ActionSpec] = field(default_factory=dict)
    registers: dict[str, Register] = field(default_factory=dict)
    counters: dict[str, Counter] = field(default_factory=dict)
    meters: dict[str, Meter] = field(default_factory=dict)
    profiles: dict[str, ActionProfile] = field(default_factory=dict)   # action profiles / selectors
    value_sets: dict[str, ValueSet] = field(default_factory=dict)      # parser value sets
    objects: dict[str, Any] = field(default_factory=dict)        # generated-code global name -> object


@dataclass
class Instance:
    """One pipeline's state plus the generated stage functions bound to it (``Program.instantiate``)."""

    state: ProgramState
    namespace: dict[str, Any]                     # globals of the stage functions (``_now_us`` is set here)
    parser: Callable[[list, bytes], tuple[int, int]]
    verify_checksum: Callable[[list], None]
    ingress: Callable[[list], None]
    egress: Callable[[list], None]
    compute_checksum: Callable[[list], None]
    deparser: Callable[[list], list[bytes]]


@dataclass
class Program:
    """A compiled v1model program: generated code over the state list S, layout, and pristine state.

    ``tables/actions/registers/...`` are the compiled declarations (names, specs, const entries): read them
    for names, never program or count through them; each ``Pipeline`` has its own copies (``pipe.tables``).
    """

    name: str
    source: str                                   # generated Python (kept for debugging: `p4 check --dump`)
    code: CodeType                                # ``source`` compiled once; executed per instance
    helpers: dict[str, Any]                       # stateless globals of the generated code
    template: ProgramState                        # compiled state, copied by every instantiate()
    action_fns: dict[str, str]                    # action name -> generated function name
    init_state: list[Any]
    sm: dict[str, int]                            # standard_metadata field -> slot
    errors: list[str]                             # error code -> name
    field_lists: dict[int, list[int]] = field(default_factory=dict)
    digest_layouts: list[DigestLayout] = field(default_factory=list)
    meta_range: tuple[int, int] = (0, 0)          # user metadata slots [lo, hi)
    headers_range: tuple[int, int] = (0, 0)
    warnings: list[str] = field(default_factory=list)   # "file:line:col: warning: ..." from the compiler
    control_plane: ControlPlaneFacts = field(default_factory=ControlPlaneFacts)   # read by p4.p4info

    @property
    def tables(self) -> dict[str, Table]:
        return self.template.tables

    @property
    def actions(self) -> dict[str, ActionSpec]:
        return self.template.actions

    @property
    def registers(self) -> dict[str, Any]:
        return self.template.registers

    @property
    def counters(self) -> dict[str, Any]:
        return self.template.counters

    @property
    def meters(self) -> dict[str, Any]:
        return self.template.meters

    @property
    def profiles(self) -> dict[str, Any]:
        return self.template.profiles

    @property
    def value_sets(self) -> dict[str, Any]:
        return self.template.value_sets

    def instantiate(self) -> Instance:
        """Fresh run-time state (a deep copy of the compiled state) with stage functions bound to it."""
        state = copy.deepcopy(self.template)
        ns = dict(self.helpers)
        ns.update(state.objects)
        exec(self.code, ns)  # our own generated code: defines the stage and action functions
        fns = {name: ns[fn] for name, fn in self.action_fns.items()}
        for spec in _action_specs(state):
            spec.fn = ns[spec.bound_fn] if spec.bound_fn else fns[spec.name]
        for t in state.tables.values():
            t.meter_exec = direct_meter_exec(t)
            t._rebuild()
        return Instance(state, ns, ns["_parser"], ns["_verify"], ns["_ingress"], ns["_egress"], ns["_compute"],
                        ns["_deparser"])


def _action_specs(state: ProgramState) -> list[ActionSpec]:
    """Every ActionSpec object reachable from the state (tables, defaults, entries, profile members)."""
    specs: dict[int, ActionSpec] = {id(a): a for a in state.actions.values()}
    for t in state.tables.values():
        found = [*t.actions.values(), t.default_action, t.initial_default[0]]
        found += [e.action for e in t.entries.values()]
        for spec in found:
            if spec is not None:
                specs[id(spec)] = spec
    for prof in state.profiles.values():
        for m in prof.members.values():
            specs[id(m.action)] = m.action
    return list(specs.values())


def set_direct_meter_rates(tables: Iterable[Table], m: Any, handle: int, rates: list[tuple[float, int]]) -> None:
    """Configure the direct meter ``m`` of the entry ``handle`` (its cell is created on the entry's first hit
    with these rates; an existing one is reconfigured).  The CLI's and P4Runtime's one way to do it."""
    m.entry_rates[handle] = rates
    for t in tables:
        if t.direct_meter is m and handle in t.entries and t.entries[handle].meter is not None:
            t.entries[handle].meter.set_rates(0, rates)


def direct_meter_exec(t: Table) -> Callable[[Any, int, float], int]:
    """The per-entry meter of a table's ``direct_meter`` (created on first use with the configured rates)."""
    def run(e: Any, length: int, now_us: float) -> int:
        m = t.direct_meter
        if m is None:
            return 0
        if e.meter is None:
            e.meter = Meter(f"{m.name}[{e.handle}]", 1, m.mtype)
            rates = m.entry_rates.get(e.handle)
            if rates is not None:
                e.meter.set_rates(0, rates)
        return e.meter.execute(0, length, now_us)
    return run
