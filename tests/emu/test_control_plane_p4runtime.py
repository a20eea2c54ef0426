"""``--control p4runtime``: the fabric's CLI table commands become P4Runtime updates that make exactly the entries
the control socket makes (unit); a fabric programmed through P4Runtime passes its reachability check (emu)."""

from __future__ import annotations

from pathlib import Path

import pytest

from emu.control_plane import IntConfig, switch_commands
from p4.compiler import compile_file
from p4.p4runtime_proto import message_class
from p4.pipeline import Pipeline
from p4.runtime.cli_updates import cli_updates
from p4.runtime.client import UPDATE_TYPES
from p4.runtime.entities import ForwardingDevice
from p4.runtime_cli import RuntimeCLI
from sw.collectives.fabric_topology import Topology, TopologySpec

FABRIC_P4 = Path(__file__).resolve().parents[2] / "p4" / "programs" / "fabric.p4"


def _state(pipe: Pipeline) -> dict[str, tuple]:
    """Every table's default and its entries in lookup order (match, action, data): what forwarding sees."""
    out = {}
    for name, t in pipe.state.tables.items():
        entries = sorted(t.entries.values(), key=lambda e: (e.priority, e.handle))
        out[name] = (t.default_action.name if t.default_action else None, t.default_data,
                     [(e.match, e.action.name, e.data) for e in entries])
    return out


@pytest.mark.unit
def test_p4runtime_updates_make_the_entries_the_cli_makes() -> None:
    prog = compile_file(FABRIC_P4)
    topo = Topology(TopologySpec(servers=2, gpus_per_server=2, spines=2))
    lines = switch_commands(topo, "p0l0", int_cfg=IntConfig(sink_mode="report", collector_port=9))
    by_cli = Pipeline(prog)
    for line in lines:
        RuntimeCLI(by_cli).execute(line)
    updates, rest = cli_updates(prog, lines)
    assert rest == []
    assert len(updates) == len(lines)                      # one update per entry, default and clone session
    by_p4rt = Pipeline(prog)
    device = ForwardingDevice(by_p4rt)
    for kind, entity in updates:
        u = message_class("p4.v1.Update")(type=UPDATE_TYPES[kind])
        u.entity.CopyFrom(entity)
        device.write(u)
    assert _state(by_p4rt) == _state(by_cli)
    assert by_p4rt.mirror_sessions == by_cli.mirror_sessions == {250: 9}
    assert any(e[2] for e in _state(by_cli).values())    # the comparison saw entries
    watch = [e for e in by_p4rt.state.tables["FabricIngress.int_watchlist"].entries.values()]
    assert len(watch) == 1 and watch[0].match[0] == (0, 0)


@pytest.mark.emu
def test_fabric_programmed_through_p4runtime_reaches_every_nic() -> None:
    from emu.checks import check_reachability
    from emu.fabric import Fabric
    from p4.runtime.client import P4RuntimeClient

    with Fabric(servers=2, gpus_per_server=1, spines=1, control="p4runtime") as fab:
        result, _ = check_reachability(fab)
        assert result.ok, result
        leaf = fab.net.switches["p0l0"]
        with P4RuntimeClient(leaf.grpc, device_id=leaf.device_id) as client:
            info = client.get_pipeline().p4info
            table = next(t.preamble.id for t in info.tables if t.preamble.name == "FabricIngress.ipv4_lpm")
            read = message_class("p4.v1.Entity")()
            read.table_entry.table_id = table
            got = client.read([read])
        want = [c for c in switch_commands(fab.topo, "p0l0", fab.ecn, fab.int_cfg) if "ipv4_lpm" in c]
        assert len(got) == len(want) > 0
