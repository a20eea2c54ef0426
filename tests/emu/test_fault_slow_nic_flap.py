"""The ``slow_nic`` / ``restore_nic`` fault kind (a rank's NIC paced at a rate: its share of the line rate in the
fabric's straggler directory, which ``starpulse train`` ranks read before every step) and the argument checks of
``flap``, ``congest``/``uncongest`` and ``pfc_storm``/``restore_pfc``: one line naming the action, the value and
the range.  Needs no running fabric: the injector of a ``Fabric`` that is not up writes only files, and a bad
flap, congest or PFC storm is refused before it touches a link or starts traffic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emu.fabric import Fabric
from emu.faults import ACTIONS, FaultError, FaultInjector
from sw.units.straggler import nic_rate_share

pytestmark = pytest.mark.unit


@pytest.fixture
def injector(tmp_path: Path) -> FaultInjector:
    return FaultInjector(Fabric(workdir=str(tmp_path)), str(tmp_path / "faults.jsonl"))  # 4x2, 100M links


def test_slow_nic_sets_its_rank_share_and_restore_nic_clears_it(injector: FaultInjector) -> None:
    assert {"slow_nic", "restore_nic", "flap"} <= set(ACTIONS)
    d = injector.straggler_dir
    event = injector.slow_nic("s1-eth0", "30M")            # server 1, rail 0: rank 1 x 2 + 0
    assert event.ok and event.changed == ["rank2"]
    assert nic_rate_share(d, 2) == pytest.approx(0.3) and nic_rate_share(d, 3) == 1.0
    injector.apply("slow_nic", "s3-eth1", "50000000")      # rank 7, in bit/s
    assert injector.active()["slow_nics"] == {"s1-eth0": 30_000_000, "s3-eth1": 50_000_000}
    injector.restore_nic("s1-eth0")
    assert nic_rate_share(d, 2) == 1.0 and nic_rate_share(d, 7) == pytest.approx(0.5)
    assert injector.active()["slow_nics"] == {"s3-eth1": 50_000_000}
    log = [json.loads(line) for line in injector.log_path.read_text().splitlines()]
    assert [(e["action"], e["target"], e["ok"]) for e in log] == [
        ("slow_nic", "s1-eth0", True), ("slow_nic", "s3-eth1", True), ("restore_nic", "s1-eth0", True)]


@pytest.mark.parametrize(("action", "target", "value", "message"), [
    ("slow_nic", "s9-eth0", "30M", "slow_nic s9-eth0: no such NIC"),
    ("slow_nic", "p0l0", "30M", "slow_nic p0l0: no such NIC"),
    ("slow_nic", "s1-eth0", None, "slow_nic s1-eth0: needs a RATE"),
    ("slow_nic", "s1-eth0", "200M", "slow_nic s1-eth0 200M: RATE must be in 1..100000000"),
    ("slow_nic", "s1-eth0", "0", "slow_nic s1-eth0 0: RATE must be in 1..100000000"),
    ("slow_nic", "s1-eth0", "fast", "fast"),
    ("restore_nic", "s0-eth7", None, "restore_nic s0-eth7: no such NIC"),
    ("flap", "p0l0:sp0", None, "flap p0l0:sp0: needs a PERIOD"),
    ("flap", "p0l0:sp0", "10us", "flap p0l0:sp0 10us: PERIOD must be at least 1 ms"),
    ("flap", "p0l0:sp0", "soon", "soon"),
    ("flap", "p0l0:nowhere", "2s", "link 'p0l0:nowhere': no such link"),
    ("congest", "s9-eth0", "60M", "congest s9-eth0: no such NIC"),
    ("congest", "s1-eth0", None, "congest s1-eth0: needs a RATE"),
    ("congest", "s1-eth0", "1G", "congest s1-eth0 1G: RATE must be in 1..100000000"),
    ("uncongest", "s1-eth0", None, "uncongest s1-eth0: not congested"),
    ("pfc_storm", "s9:0", None, "pfc_storm s9:0: expected HOST[:RAIL], a server s0..s3 and a rail 0..1"),
    ("pfc_storm", "s1:2", None, "pfc_storm s1:2: expected HOST[:RAIL]"),
    ("pfc_storm", "s1:x", None, "pfc_storm s1:x: expected HOST[:RAIL]"),
    ("pfc_storm", "s1-eth0", None, "pfc_storm s1-eth0: expected HOST[:RAIL]"),
    ("pfc_storm", "s1:0", None, "pfc_storm s1:0: this fabric runs without PFC"),
    ("restore_pfc", "s1", None, "restore_pfc s1: not storming"),
])
def test_bad_nic_rate_or_flap_is_a_one_line_fault_error(injector: FaultInjector, action: str, target: str,
                                                        value: str | None, message: str) -> None:
    with pytest.raises(FaultError) as exc:
        injector.apply(action, target, value)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert injector.active()["slow_nics"] == {} and injector.active()["flapping_links"] == []
    assert injector.active()["congested_nics"] == {} and injector.active()["pfc_storms"] == []
    assert json.loads(injector.log_path.read_text().splitlines()[-1])["ok"] is False
