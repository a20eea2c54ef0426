"""Head-of-line blocking under PFC (sw.apps.hol_bench, small): a victim sharing the uplinks with a 4->1 incast gets
all its bytes through while the incast's priority is paused; on its own priority its TM queue is never paused.
Throughputs are printed (the benchmark measures them), never asserted."""

from __future__ import annotations

import json
import os

import pytest

from sw.apps.hol_bench import HolConfig, run_scenario
from sw.clock import ENV_DILATION, Clock

pytestmark = pytest.mark.emu

# 24 KiB of victim data (~28 kB on the wire with INT) stay below XOFF (40 kB): the victim alone can never pause
# its own priority, so any pause of its queue could only come from the incast.
CFG = HolConfig(senders=4, incast_bytes=128 * 1024, victim_bytes=24 * 1024, dilation=40.0, timeout_s=30.0)


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    old = os.environ.get(ENV_DILATION)
    os.environ[ENV_DILATION] = repr(CFG.dilation)       # the switch processes inherit it
    try:
        clock = Clock(CFG.dilation)
        out = {name: run_scenario(name, CFG, clock) for name in ("pfc", "pfc_own_priority")}
    finally:
        if old is None:
            os.environ.pop(ENV_DILATION, None)
        else:
            os.environ[ENV_DILATION] = old
    print(json.dumps({k: {f: v[f] for f in ("victim_throughput_bps", "pauses_sent", "incast_queue_pauses",
                                            "victim_queue_pauses", "headroom_drop_pkts")} for k, v in out.items()}))
    return out


def test_victim_in_the_incast_priority_is_delivered_while_pauses_flow(runs) -> None:
    r = runs["pfc"]
    assert r["victim_bytes_ok"] and r["incast_data_ok"]
    assert r["pauses_sent"] > 0 and r["incast_queue_pauses"] > 0
    assert r["victim_queue_pauses"] == r["incast_queue_pauses"]      # one priority: the same queues
    assert list(r["fidelity"]) == ["time_dilation", "bound_ns", "late_share", "lag_p99_ns", "lag_max_ns",
                                   "worst_component", "ok"]
    assert r["fidelity"]["time_dilation"] == CFG.dilation and r["fidelity"]["worst_component"] is not None


def test_victim_on_its_own_priority_is_never_paused(runs) -> None:
    r = runs["pfc_own_priority"]
    assert r["victim_bytes_ok"] and r["incast_data_ok"]
    assert r["victim_priority"] != r["incast_priority"]
    assert r["pauses_sent"] > 0 and r["incast_queue_pauses"] > 0
    assert r["victim_queue_pauses"] == 0 and r["victim_priority_pauses_sent"] == 0
    assert r["victim_nic_pauses_rx"] == 0
