"""The ``flap`` fault on a running fabric: a leaf-spine link goes down and up every half period on the fabric's
clock (each change logged), ``link_up`` stops it and leaves the link up, and a fabric torn down while a link
flaps stops the flapping first (no change is attempted on a removed link)."""

from __future__ import annotations

import json

import pytest

from emu.fabric import Fabric
from emu.ops_collect import link_carrier

pytestmark = pytest.mark.emu


def _carrier(fab: Fabric, switch: str, ifname: str) -> bool:
    return link_carrier(fab.net.node_pids()[switch]).get(ifname, False)


def test_flap_cycles_the_link_until_link_up_and_stops_at_teardown() -> None:
    with Fabric(servers=2, gpus_per_server=1, spines=2, time_dilation=1) as fab:
        link = fab.faults.link("p0l0:sp0")
        leaf_if = link.a_ifname if link.a == "p0l0" else link.b_ifname
        fab.fault("flap", "p0l0:sp0", "400ms")
        assert fab.faults.active()["flapping_links"] == ["p0l0:sp0"]
        seen: list[bool] = []
        deadline = fab.clock.now_ns() + 3_000_000_000
        while fab.clock.now_ns() < deadline and not (False in seen and seen[-1]):
            seen.append(_carrier(fab, "p0l0", leaf_if))
            fab.clock.sleep_ns(50_000_000)
        assert False in seen and seen[-1], seen         # it was seen down, then up again
        fab.fault("link_up", "p0l0:sp0")
        assert fab.faults.active()["flapping_links"] == [] and fab.faults.active()["down_links"] == []
        fab.clock.sleep_ns(600_000_000)                 # more than a half period: no further change
        assert _carrier(fab, "p0l0", leaf_if)
        log = [json.loads(line) for line in fab.faults.log_path.read_text().splitlines()]
        kinds = [e["action"] for e in log]
        assert kinds[0] == "flap" and "flap_down" in kinds and "flap_up" in kinds and kinds[-1] == "link_up"
        assert all(e["ok"] for e in log), log
        fab.fault("flap", "p0l0:sp1", "400ms")          # left flapping: the teardown stops it
        flaps = fab.faults
    assert flaps.flapping == {}
