"""A what-if in the simulator: links run at a share of their rate (``SimParams.link_shares``), as the operations
system's hypotheses ask ("if link X ran at r, the collective would take T")."""

from __future__ import annotations

import pytest

from sw.collectives.fabric_topology import TopologySpec
from sw.sim import SimParams, simulate

pytestmark = pytest.mark.unit

SPEC = TopologySpec(servers=4, gpus_per_server=2, spines=2, link_rate_bps=100_000_000)


def test_a_nic_link_at_half_its_rate_doubles_a_ring_it_bottlenecks() -> None:
    params = SimParams(alpha_s=0.0, intra_rate_bps=9e8)
    healthy = simulate(SPEC, "allreduce", "ring", 1 << 20, "ecmp", params)["predicted_s"]
    half = simulate(SPEC, "allreduce", "ring", 1 << 20, "ecmp",
                    SimParams(alpha_s=0.0, intra_rate_bps=9e8, link_shares=(("s1-eth0", "p0l0", 0.5),)))
    assert half["predicted_s"] == pytest.approx(2 * healthy, rel=0.02)
    spine = simulate(SPEC, "allreduce", "hier", 1 << 20, "ecmp",
                     SimParams(alpha_s=0.0, intra_rate_bps=9e8, link_shares=(("p0l0", "sp1", 0.5),)))
    assert spine["predicted_s"] == pytest.approx(
        simulate(SPEC, "allreduce", "hier", 1 << 20, "ecmp", params)["predicted_s"])   # rail-local: no spine


@pytest.mark.parametrize("share", [(("s9-eth0", "p0l0", 0.5),), (("s1-eth0", "p0l0", 0.0),)])
def test_a_link_not_in_the_fabric_or_a_bad_share_is_named(share) -> None:
    with pytest.raises(ValueError, match="link s.-eth0<->p0l0"):
        simulate(SPEC, "allreduce", "ring", 1 << 20, "ecmp", SimParams(link_shares=share))
