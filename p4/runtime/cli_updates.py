"""simple_switch_CLI table commands -> P4Runtime updates, for controllers that keep their entries as CLI text
(the fabric's control plane, ``fabric up --control p4runtime``).

No second parser: the ``table_*`` lines run through ``RuntimeCLI`` on a scratch pipeline of the same program, and
the resulting entries, default actions, clone sessions and multicast groups are read out as P4Runtime entities
(``ForwardingDevice``), so the switch gets exactly what the control socket would have made.  Other lines (queues,
port rates, PFC) are returned for the control socket.
"""

from __future__ import annotations

from typing import Any

from p4.p4runtime_proto import message_class
from p4.pipeline import Pipeline
from p4.program import Program
from p4.runtime.entities import ForwardingDevice
from p4.runtime_cli import RuntimeCLI

TABLE_COMMANDS = ("table_add", "table_set_default", "mirroring_add", "mc_mgrp_create", "mc_node_create",
                  "mc_node_associate")
"""The commands whose result is P4Runtime entities (tables, clone sessions, multicast groups)."""
PRIORITY_BASE = 1 << 24
"""CLI priority p (lower wins) -> P4Runtime priority PRIORITY_BASE - p (higher wins): the same order."""


def cli_updates(program: Program, lines: list[str]) -> tuple[list[tuple[str, Any]], list[str]]:
    """(P4Runtime (update type, Entity) pairs for the ``table_add``/``table_set_default`` lines, the other lines)."""
    pipe = Pipeline(program)
    cli = RuntimeCLI(pipe)
    rest = []
    for line in lines:
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if words[0] in TABLE_COMMANDS:
            cli.execute(line)
        else:
            rest.append(line)
    device = ForwardingDevice(pipe)
    updates: list[tuple[str, Any]] = []
    for tid, info in device.tables.items():
        table = pipe.state.tables[info.preamble.name]
        if (table.default_action, table.default_data) != table.initial_default:
            read = message_class("p4.v1.Entity")()
            read.table_entry.table_id, read.table_entry.is_default_action = tid, True
            updates.extend(("MODIFY", ent) for ent in device.read(read))
        if table.const_entries:
            continue
        needs_priority = any(k.kind in ("ternary", "range", "optional") for k in table.keys)
        for e in sorted(table.entries.values(), key=lambda e: e.handle):
            ent = device.entry_entity(tid, table, e, False)
            ent.table_entry.priority = PRIORITY_BASE - e.priority if needs_priority else 0
            updates.append(("INSERT", ent))
    for kind in ("clone_session_entry", "multicast_group_entry"):
        read = message_class("p4.v1.Entity")()
        getattr(read.packet_replication_engine_entry, kind).SetInParent()
        updates.extend(("INSERT", ent) for ent in device.read(read))
    return updates, rest
