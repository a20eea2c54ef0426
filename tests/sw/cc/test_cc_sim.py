"""Closed-loop behaviour of the golden models on the deterministic single-bottleneck simulator."""

from __future__ import annotations

import pytest

from sw.cc import CcParamError
from sw.cc.dcqcn import DcqcnParams
from sw.cc.sim import SimConfig, simulate

pytestmark = pytest.mark.unit

MS = 1_000_000


def test_same_config_same_result():
    cfg = SimConfig(cc="dcqcn", n_flows=3, duration_ns=3 * MS, start_gap_ns=200_000, seed=5)
    a, b = simulate(cfg), simulate(cfg)
    assert [f.rx_bytes for f in a.flows] == [f.rx_bytes for f in b.flows]
    assert (a.marks, a.events, a.max_queue_bytes) == (b.marks, b.events, b.max_queue_bytes)


def test_first_cnp_halves_a_line_rate_flow_in_closed_loop():
    """Two line-rate flows overload the link; each flow's first CNP (alpha = 1) halves its rate exactly."""
    line = 25_000_000
    cfg = SimConfig(cc="dcqcn", n_flows=2, link_kbps=line, duration_ns=100_000, sample_ns=500, kmax_bytes=20_000,
                    dcqcn=DcqcnParams(line_rate_kbps=line))
    r = simulate(cfg)
    for f in r.flows:
        assert f.cnps >= 1
        first_drop = next(s for s in f.rate_samples_kbps if s != line)
        assert first_drop == line // 2


@pytest.mark.parametrize("n_flows", [4, 8])
def test_dcqcn_converges_to_fairness(n_flows):
    cfg = SimConfig(cc="dcqcn", n_flows=n_flows, duration_ns=100 * MS, warmup_ns=20 * MS,
                    start_gap_ns=1 * MS, seed=1)
    r = simulate(cfg)
    assert r.jain >= 0.99, r.throughputs_bps()
    assert r.utilization >= 0.95
    assert r.drops == 0
    assert all(f.cnps > 0 for f in r.flows)


@pytest.mark.parametrize("n_flows", [1, 2, 4, 8])
def test_hpcc_holds_utilization_near_eta_with_an_empty_queue(n_flows):
    cfg = SimConfig(cc="hpcc", n_flows=n_flows, duration_ns=4 * MS, warmup_ns=2 * MS, sample_ns=10_000)
    r = simulate(cfg)
    assert abs(r.utilization - 0.95) <= 0.01, r.utilization
    assert r.jain >= 0.99, r.throughputs_bps()
    late = r.queue_samples_bytes[len(r.queue_samples_bytes) // 2:]
    assert max(late) <= 4 * cfg.mtu_bytes          # HPCC keeps the standing queue near zero
    assert r.drops == 0


def test_no_cc_overflows_the_buffer():
    r = simulate(SimConfig(cc="none", n_flows=4, duration_ns=2 * MS, buffer_bytes=200_000))
    assert r.drops > 0
    assert r.max_queue_bytes > 200_000 - 1024


def test_incast_flow_completion():
    cfg = SimConfig(cc="hpcc", n_flows=8, flow_bytes=1_000_000, duration_ns=10 * MS)
    r = simulate(cfg)
    fcts = [f.completion_ns for f in r.flows]
    assert all(t is not None for t in fcts)
    # 8 MB through 25 Gb/s needs >= 2.56 ms; HPCC at eta should finish within ~20 % of that
    assert 2_560_000 <= max(fcts) <= 3_100_000, fcts


def test_bad_config_is_a_user_error():
    with pytest.raises(CcParamError, match=r"sim\.cc='cubic': allowed values are dcqcn, hpcc, none"):
        SimConfig(cc="cubic")
    with pytest.raises(CcParamError, match=r"sim\.warmup_ns"):
        SimConfig(duration_ns=10, warmup_ns=10)
