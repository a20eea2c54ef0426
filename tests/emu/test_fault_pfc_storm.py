"""The ``pfc_storm`` fault on a running PFC fabric: a process in the host's namespace (``emu.pfc_storm``) makes its
NIC send maximum-quanta PAUSE frames for the lossless priority, refreshed before they expire, so the leaf's port
toward it receives pause after pause and stays held; ``restore_pfc`` stops the process (which sends XON, so the
leaf resumes at once); the process carries the run's owner tag (crash cleanup finds it) and a storm left running
is stopped by the fabric's teardown."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emu.fabric import Fabric
from emu.faults import PFC_STORM_REFRESHES
from emu.reap import OWNER_ENV
from emu.status import parse_table
from sw.units.pfc_frame import PFC_MAX_QUANTA, quanta_to_ns

pytestmark = pytest.mark.emu


def _pfc_row(fab: Fabric, leaf: str, port: int, prio: int) -> dict:
    return next(r for r in parse_table(fab.switch_cli(leaf, f"pfc_stats {port}")) if r["prio"] == prio)


def test_pfc_storm_holds_the_leaf_port_until_restored_and_teardown_stops_it() -> None:
    with Fabric(servers=2, gpus_per_server=1, spines=0, pfc="on", time_dilation=1) as fab:
        nic = fab.topo.nics_of("s1")[0]
        prio = fab.spec.pfc_priority
        interval_ns = quanta_to_ns(PFC_MAX_QUANTA, fab.spec.link_rate_bps) // PFC_STORM_REFRESHES
        event = fab.fault("pfc_storm", "s1")                       # rail 0 when left out
        assert event.ok and event.changed == ["s1", nic.leaf]
        proc = fab.faults.storming[nic.ifname]
        assert fab.faults.active()["pfc_storms"] == [nic.ifname]
        env = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert any(e.startswith(f"{OWNER_ENV}=".encode()) for e in env)   # the crash cleanup's mark
        while _pfc_row(fab, nic.leaf, nic.leaf_port, prio)["pauses_rx"] < 4:
            assert proc.poll() is None, "the storm process ended on its own"
            fab.clock.sleep_ns(interval_ns // 2)
        row = _pfc_row(fab, nic.leaf, nic.leaf_port, prio)
        assert row["paused_ns"] >= 3 * interval_ns, row           # refreshed before expiry: held throughout
        assert _pfc_row(fab, nic.leaf, nic.leaf_port, 0)["pauses_rx"] == 0   # only the lossless class
        fab.fault("restore_pfc", "s1:0")
        assert proc.poll() is not None and fab.faults.active()["pfc_storms"] == []
        deadline = fab.clock.now_ns() + 20 * interval_ns
        while _pfc_row(fab, nic.leaf, nic.leaf_port, prio)["xon_rx"] < 1 and fab.clock.now_ns() < deadline:
            fab.clock.sleep_ns(interval_ns // 4)
        assert _pfc_row(fab, nic.leaf, nic.leaf_port, prio)["xon_rx"] == 1   # its last word: resume
        assert proc not in fab.helper_procs
        fab.fault("pfc_storm", "s0:0")                             # left storming: the teardown stops it
        left = fab.faults.storming["s0-eth0"]
    assert left.poll() is not None
    assert not os.path.exists(f"/proc/{left.pid}/cmdline") or b"pfc_storm" not in \
        Path(f"/proc/{left.pid}/cmdline").read_bytes()
