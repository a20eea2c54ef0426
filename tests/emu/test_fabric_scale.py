"""Scale: 16 servers x 4 rails (64 NICs, 4 leaves, 2 spines) comes up, passes all-pairs reachability with the
right INT hop counts, and tears down leaving no namespace, veth or process; ``scripts/fabric_scale.py`` at its
smallest size prints its JSON and plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from emu.checks import check_int_hops, check_reachability, fabric_pairs
from emu.fabric import Fabric
from emu.net import leftovers
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]


def test_sixteen_servers_by_four_rails_up_reachable_down_clean(record_property: pytest.RecordProperty) -> None:
    fab = Fabric(TopologySpec(servers=16, gpus_per_server=4, spines=2))
    try:
        fab.up()
        assert len(fab.topo.nics) == 64 and len(fab.topo.leaves) == 4 and len(fab.topo.spines) == 2
        reach, results = check_reachability(fab)
        assert reach.ok, reach.detail
        assert reach.data["pairs"] == 64 * 60
        hops = check_int_hops(fab, fabric_pairs(fab), results)
        assert hops.ok, hops.detail
        fp = fab.footprint
    finally:
        fab.down()
    assert fp is not None and leftovers(fp) == []
    record_property("up_s", round(fab.timings.up_s, 2))
    record_property("down_s", round(fab.timings.down_s, 2))
    print(f"16x4 fabric: up {fab.timings.up_s:.1f} s, down {fab.timings.down_s:.1f} s")


def test_scale_script_at_its_smallest_size(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "fabric_scale.py"), "--nics", "16", "--json",
                          "--plot", str(tmp_path / "scale.png")], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "fabric_scale: 16 NICs" in out.stderr                      # progress lines
    row = json.loads(out.stdout)["rows"][0]
    assert row["nics"] == 16 and row["servers"] == 4 and "error" not in row, row
    assert row["up_s"] > 0 and row["test_s"] > 0 and row["down_s"] > 0 and row["peak_rss_bytes"] > 0
    assert row["failed_checks"] == {} or not row["fidelity"]["ok"], row   # a pass, or a starved CPU said so
    assert (tmp_path / "scale.png").stat().st_size > 0
    bad = subprocess.run([sys.executable, str(REPO / "scripts" / "fabric_scale.py"), "--nics", "16,x"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
