"""The compiled form of a v1model program: generated stage functions plus their run-time objects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from p4.tables import ActionSpec, Table

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
class Program:
    """A compiled v1model program: stage functions over the state list S and their run-time objects."""

    name: str
    source: str                                   # generated Python (kept for debugging: `p4 check --dump`)
    init_state: list[Any]
    parser: Callable[[list, bytes], tuple[int, int]]
    verify_checksum: Callable[[list], None]
    ingress: Callable[[list], None]
    egress: Callable[[list], None]
    compute_checksum: Callable[[list], None]
    deparser: Callable[[list], list[bytes]]
    sm: dict[str, int]                            # standard_metadata field -> slot
    errors: list[str]                             # error code -> name
    tables: dict[str, Table] = field(default_factory=dict)
    actions: dict[str, ActionSpec] = field(default_factory=dict)
    registers: dict[str, Any] = field(default_factory=dict)
    counters: dict[str, Any] = field(default_factory=dict)
    meters: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, Any] = field(default_factory=dict)       # action profiles / selectors
    value_sets: dict[str, Any] = field(default_factory=dict)     # parser value sets
    field_lists: dict[int, list[int]] = field(default_factory=dict)
    digest_layouts: list[DigestLayout] = field(default_factory=list)
    meta_range: tuple[int, int] = (0, 0)          # user metadata slots [lo, hi)
    headers_range: tuple[int, int] = (0, 0)
    namespace: dict[str, Any] = field(default_factory=dict)
