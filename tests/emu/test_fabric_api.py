"""The ``Fabric`` API checks its keyword options with the CLI's own parser: every bad value raises the line
``starpulse fabric up`` prints for the same flag (no root: nothing is built); the node and link classes of
topology scripts carry the docstrings ``help()`` shows."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from emu import cli
from emu.fabric import Fabric

pytestmark = pytest.mark.unit

BAD = [   # (Fabric keyword options, the same as fabric up flags)
    ({"servers": 0}, ["--servers", "0"]),
    ({"servers": "x"}, ["--servers", "x"]),
    ({"link_rate": "10X"}, ["--link-rate", "10X"]),
    ({"delay": "5 parsecs"}, ["--delay", "5 parsecs"]),
    ({"mtu": 100}, ["--mtu", "100"]),
    ({"seed": -1}, ["--seed", "-1"]),
    ({"backend": "tofino"}, ["--backend", "tofino"]),
    ({"pfc_priority": 2}, ["--pfc-priority", "2"]),
    ({"pfc": True, "pfc_priority": 6}, ["--pfc", "on", "--pfc-priority", "6"]),
    ({"pfc": "maybe"}, ["--pfc", "maybe"]),
    ({"pfc_xoff": 1000}, ["--pfc-xoff", "1000"]),
    ({"pfc": True, "pfc_xon": 9, "pfc_xoff": 3}, ["--pfc", "on", "--pfc-xon", "9", "--pfc-xoff", "3"]),
    ({"int_sink": "cloud"}, ["--int-sink", "cloud"]),
    ({"log_level": "loud"}, ["--log-level", "loud"]),
    ({"impairable": "s0:sp9"}, ["--impairable", "s0:sp9"]),
    ({"servers": 3, "pods": 2}, ["--servers", "3", "--pods", "2"]),
    ({"time_dilation": 0}, ["--time-dilation", "0"]),
    ({"time_dilation": "auto:x"}, ["--time-dilation", "auto:x"]),
    ({"name": "a b"}, ["--name", "a b"]),
    ({"name": "n" * 49}, ["--name", "n" * 49]),
]


@pytest.mark.parametrize(("options", "flags"), BAD, ids=[" ".join(f) for _, f in BAD])
def test_bad_options_raise_the_cli_line(options, flags, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path))
    with pytest.raises(Exception) as api:
        Fabric(**options)
    assert getattr(api.value, "is_user_error", False), repr(api.value)
    try:
        code = cli.main(["up", *flags])
    except SystemExit as exc:   # argparse's own checks (types, choices) exit from the parser
        code = exc.code
    assert code == 2
    line = capsys.readouterr().err.strip()
    assert "\n" not in line
    assert line in (f"starpulse fabric: error: {api.value}", f"starpulse fabric up: error: {api.value} (see --help)")


def test_unknown_option_names_the_allowed_ones() -> None:
    with pytest.raises(cli.FabricCliError, match=r"Fabric\(gpus=\.\.\.\): unknown option \(allowed: backend, "):
        Fabric(gpus=2)


def test_keyword_options_make_the_cli_spec() -> None:
    parsed = cli.fabric_options(cli.parse_up_options({"servers": 2, "link_rate": "1G", "pfc": True, "seed": 7}))
    fab = Fabric(servers=2, link_rate="1G", pfc=True, seed=7)
    assert fab.spec == parsed["spec"] and fab.pfc == parsed["pfc"]
    assert fab.spec.link_rate_bps == 1_000_000_000 and fab.spec.pfc_priority == 3 and fab.pfc.enabled


def test_spec_and_topology_options_do_not_mix() -> None:
    from sw.collectives.fabric_topology import TopologySpec

    with pytest.raises(Exception, match="need spec=None"):
        Fabric(TopologySpec(), servers=2)


def _public(cls: type) -> list[str]:
    return [n for n, v in vars(cls).items() if not n.startswith("_") and inspect.isfunction(v)]


def test_script_building_blocks_are_documented() -> None:
    from emu.linkemu import WiredLink, add_wired_link
    from emu.net import RoceHost, host_nic, nic_batch
    from emu.p4switch import P4Host, P4Switch
    from emu.wire import WireProfile

    undocumented = [f"{o.__name__}" for o in (P4Switch, P4Host, RoceHost, host_nic, nic_batch, WiredLink,
                                              add_wired_link, WireProfile, Fabric) if not (o.__doc__ or "").strip()]
    undocumented += [f"{c.__name__}.{m}" for c in (RoceHost, WiredLink, Fabric) for m in _public(c)
                     if not (getattr(c, m).__doc__ or "").strip()]
    assert undocumented == []
    for word in ("backend", "commands", "pcap_dir", "priority_queues", "PFC", "dilation"):
        assert word in P4Switch.__doc__, word
    for word in ("offloads", "INT headroom", "static neighbours", "per-rail"):
        assert word in RoceHost.__doc__, word
    for method in ("run", "fault", "cli", "launch", "status", "probe", "int_collector", "port_counters"):
        assert (getattr(Fabric, method).__doc__ or "").strip(), method


def test_readme_names_every_topology_example() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## Topology scripts", 1)[1].split("\n## ", 1)[0]
    for name in ("two_leaf_p4.py", "mixed_bridge_p4.py", "fabric_allreduce.py", "incast_int.py"):
        assert name in section, name
        assert len((Path(__file__).resolve().parents[2] / "examples" / name).read_text().splitlines()) <= 80, name
