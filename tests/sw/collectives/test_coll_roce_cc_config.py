"""The RoCE transport's congestion-control settings (issue 20): $STARPULSE_ROCE_CC takes hpcc, the fabric's base
round trip ($STARPULSE_ROCE_BASE_RTT, ``TopologySpec.base_rtt_ns``) becomes part of HPCC's T; bad values name
the variable and the range."""

from __future__ import annotations

import pytest

from sw.collectives.config import CommConfig
from sw.collectives.errors import CollectiveUserError
from sw.collectives.fabric_topology import TopologySpec
from sw.collectives.transport.roce import INFLIGHT_RTT_WALL_S, hpcc_base_rtt_ns, inflight_budget_bytes

pytestmark = pytest.mark.unit


def test_roce_cc_and_base_rtt_from_the_environment() -> None:
    assert CommConfig.from_env({}).roce_cc == "dcqcn" and CommConfig.from_env({}).roce_base_rtt_ns == 0
    cfg = CommConfig.from_env({"STARPULSE_ROCE_CC": " HPCC ", "STARPULSE_ROCE_BASE_RTT": "389280"})
    assert (cfg.roce_cc, cfg.roce_base_rtt_ns) == ("hpcc", 389_280)
    assert CommConfig.from_env({"STARPULSE_ROCE_BASE_RTT": "2.5us"}).roce_base_rtt_ns == 2_500


@pytest.mark.parametrize(("var", "value", "needle"), [
    ("STARPULSE_ROCE_CC", "timely", "$STARPULSE_ROCE_CC='timely': expected one of dcqcn, hpcc, none"),
    ("STARPULSE_ROCE_BASE_RTT", "-5us", "$STARPULSE_ROCE_BASE_RTT='-5us': expected a duration within 0..10 s"),
    ("STARPULSE_ROCE_BASE_RTT", "11s", "$STARPULSE_ROCE_BASE_RTT='11s': expected a duration within 0..10 s"),
    ("STARPULSE_ROCE_BASE_RTT", "fast", "$STARPULSE_ROCE_BASE_RTT='fast'"),
])
def test_bad_values_name_the_variable_and_the_range(var: str, value: str, needle: str) -> None:
    with pytest.raises(CollectiveUserError) as info:
        CommConfig.from_env({var: value})
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_fabric_base_rtt_is_serialization_out_and_back_plus_delays() -> None:
    # 2 host links at 100 Mb/s, 2 leaf-spine links at 4 x 100M / 2 spines = 200 Mb/s; a 1500-byte MTU frame
    # (+14 header +24 wire overhead) out and a 60-byte frame (+24) back on each link
    bits = (1500 + 14 + 24 + 60 + 24) * 8
    expect = 2 * bits / 100e6 * 1e9 + 2 * bits / 200e6 * 1e9
    assert TopologySpec().base_rtt_ns() == round(expect)
    assert TopologySpec(spines=0).base_rtt_ns() == round(2 * bits / 100e6 * 1e9)          # one leaf: 2 links
    assert TopologySpec(spines=0, delay_ns=5_000).base_rtt_ns() == round(2 * bits / 100e6 * 1e9) + 4 * 5_000
    assert TopologySpec(link_rate_bps=10**9).base_rtt_ns() < TopologySpec().base_rtt_ns()


def test_hpcc_t_adds_the_stacks_round_trip_and_covers_the_peer_budget() -> None:
    stack_ns = INFLIGHT_RTT_WALL_S * 1e9
    assert hpcc_base_rtt_ns(389_280, 1.0) == 389_280 + int(stack_ns)
    assert hpcc_base_rtt_ns(389_280, 100.0) == 389_280 + int(stack_ns / 100)
    assert hpcc_base_rtt_ns(0, 1e9) == 1000                          # never below 1 us (the NIC's floor)
    # a peer budget of 12 x 1024 bytes at 100 Mb/s takes 983 us: HPCC's window (line rate x T) covers it
    budget = inflight_budget_bytes(100e6, 1024, 40.0)
    assert budget == 12 * 1024
    assert hpcc_base_rtt_ns(389_280, 40.0, 100e6, budget) == 983_040
    assert hpcc_base_rtt_ns(389_280, 1.0, 100e6, budget) == 389_280 + int(stack_ns)   # the round trip is longer
