"""The PFC-storm rule (``sw.ops.diagnose.pfc_storms``) on a live PFC fabric with ops telemetry (2 pods x 2 servers,
one spine): under an incast of line-rate RoCE from the three other servers into s0 the switches pause each other
(ordinary PFC: the spine and the far leaf receive pauses while their traffic moves) and the rule names nothing;
the same incast while s0's NIC storms (``pfc_storm s0``) holds the leaf's port toward s0 with packets queued and
its egress idle, and the rule names the link ``s0<->p0l0``.  About a minute."""

from __future__ import annotations

from typing import Any

import pytest

from emu.fabric import Fabric
from emu.fabric_bench import run_once
from sw.ops.diagnose import pfc_storms
from sw.ops.expected import port_deltas

pytestmark = pytest.mark.emu

WALL_S = 4.0


def _incast_polls(fab: Fabric) -> list[dict[str, Any]]:
    """The switch polls taken while an incast into s0 ran (from its start to its end, one more poll at the end)."""
    start: list[int] = []
    run_once(fab, pattern="incast", fraction=1.0, wall_s=WALL_S, datapath="python",
             on_start=lambda _pids: start.append(fab.clock.box_ns()))
    fab.collector.poll()
    return fab.collector.store.port_polls(start[0])


def test_ordinary_pfc_under_an_incast_is_no_storm_and_a_storming_nic_is() -> None:
    with Fabric(servers=4, gpus_per_server=1, pods=2, spines=1, pfc="on", ops=True, time_dilation=20) as fab:
        links = fab.collector.store.meta()["links"]
        polls = _incast_polls(fab)
        paused = {k: d for k, d in port_deltas(polls).items() if d["pfc_rx"] > 0}
        assert paused, "no switch port received a pause: the incast did not exercise PFC"
        assert all(d["tx_bytes"] > 0 for d in paused.values()), paused     # traffic moved between the pauses
        assert pfc_storms(polls, set(), links) == []
        fab.fault("pfc_storm", "s0")
        try:
            storm = pfc_storms(_incast_polls(fab), set(), links)
        finally:
            fab.fault("restore_pfc", "s0")
        assert [s.place for s in storm] == ["s0<->p0l0"], storm
        assert storm[0].kind == "pfc_storm" and storm[0].severity >= 0.5
        assert "PFC pauses received" in storm[0].evidence[0]
