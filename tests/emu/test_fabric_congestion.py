"""Congestion on purpose: one leaf port shaped below the offered load.  ECN marks follow the RED curve set from
the control plane (measured from the received packets), and INT's queue occupancy grows at that hop only."""

from __future__ import annotations

import pytest

from emu.checks import CongestionRun, check_ecn_curve, check_int_queue, congest, red_probability
from emu.control_plane import EcnConfig
from emu.fabric import Fabric
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu

KMIN, KMAX, PMAX = 5, 30, 1.0


@pytest.fixture(scope="module")
def run() -> tuple[Fabric, CongestionRun]:
    fab = Fabric(TopologySpec(servers=4, gpus_per_server=2, spines=0), ecn=EcnConfig(KMIN, KMAX, PMAX))
    with fab:
        yield fab, congest(fab, overload=1.2)


def test_ecn_marking_fraction_follows_the_configured_red_curve(run: tuple[Fabric, CongestionRun]) -> None:
    fab, cong = run
    result = check_ecn_curve(fab, cong)
    assert result.ok, result.detail
    depths = cong.deq_depths()                                # what RED judged: the depth at dequeue (INT)
    assert max(depths) > KMAX and min(depths) < KMIN          # the queue swept the whole curve
    # the lower and upper halves of the ramp: marked fractions near RED's average there, and increasing
    halves = [(KMIN + 1, (KMIN + KMAX) // 2), ((KMIN + KMAX) // 2 + 1, KMAX - 1)]
    fractions = []
    for lo, hi in halves:
        sample = [(q, row[0] == 3) for q, row in zip(depths, cong.rows, strict=True) if lo <= q <= hi]
        assert len(sample) >= 10, f"only {len(sample)} packets saw depths {lo}..{hi}"
        expected = sum(red_probability(q, KMIN, KMAX, PMAX) for q, _ in sample) / len(sample)
        fraction = sum(m for _, m in sample) / len(sample)
        assert abs(fraction - expected) < 0.25, f"depth {lo}..{hi}: marked {fraction:.2f}, RED {expected:.2f}"
        fractions.append(fraction)
    assert fractions[0] < fractions[1]
    assert fab.status()["totals"]["ecn_marks"] >= sum(row[0] == 3 for row in cong.rows)


def test_int_queue_occupancy_grows_when_congested_and_is_zero_on_idle_paths(
        run: tuple[Fabric, CongestionRun]) -> None:
    fab, cong = run
    result = check_int_queue(fab, cong)
    assert result.ok, result.detail
    occupancy = [row[3] for row in cong.rows]
    assert occupancy[0] <= 1 and max(occupancy) >= KMAX
    assert result.data["idle_probes"] > 0 and result.data["idle_max_pkts"] <= 1
    assert all(row[1] == 1 for row in cong.rows)             # rail-local: one INT hop


def test_a_failed_queue_check_says_whether_the_emulation_kept_up(run: tuple[Fabric, CongestionRun]) -> None:
    fab, cong = run
    flat = CongestionRun(cong.link, cong.rate_bps, cong.service_us, [[0, 1, 0, 0, 0]] * 20, cong.idle_results)
    for result in (check_int_queue(fab, flat), check_ecn_curve(fab, flat)):   # the queue never built: both fail
        assert not result.ok
        assert "fidelity ok" in result.detail or "fidelity NOT ok" in result.detail, result.detail
        assert set(result.data["fidelity"]) >= {"ok", "time_dilation", "worst_component"}, result.data
