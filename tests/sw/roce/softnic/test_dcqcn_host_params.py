"""The DCQCN parameters the host stack runs (sw.roce.softnic.qp_pacer.make_cc/make_np) in sw.cc's closed-loop
simulator: an
8 -> 1 incast of 1 MiB flows at 10 Gb/s with the DCQCN paper's ECN thresholds loses nothing, the firmware's
unclamped target rate refills the link faster than the paper's clamp after the incast's burst of CNPs, the 4 us
alpha/CNP timing with the line/16 floor fills it better than the paper's 55/50 us timing with a 100 Mb/s floor,
the paper's byte counter (B = 10 MB: timer-only, rate-independent increase) with R_AI = 100 Mb/s gives fairer
completion times and a fuller link than NVIDIA's byte counter (32767 B) with the paper's 40 Mb/s, and fuller than the
paper's 40 Mb/s step alone, and a 16 -> 1 incast (the most the floor can still slow to its share) loses nothing
either."""

from __future__ import annotations

import pytest

from sw.cc.dcqcn import DcqcnParams, DcqcnRp
from sw.cc.sim import CcSimResult, SimConfig, simulate
from sw.roce.softnic.qp_pacer import (
    DCQCN_CLAMP_TARGET_RATE,
    DCQCN_CNP_INTERVAL_NS,
    DCQCN_MIN_RATE_LINE_DIVISOR,
    make_cc,
    make_np,
)

pytestmark = pytest.mark.unit

LINK_BPS = 10_000_000_000
FRAME_BYTES = 1082  # a 1 KiB-payload RoCE frame: the fabric's RED thresholds are in these packets


def _host_params() -> DcqcnParams:
    cc = make_cc("dcqcn", LINK_BPS)
    assert isinstance(cc, DcqcnRp)
    return cc.params


def _simulate(params: DcqcnParams, senders: int = 8) -> CcSimResult:
    cfg = SimConfig(n_flows=senders, cc="dcqcn", link_kbps=LINK_BPS // 1000, buffer_bytes=2_000_000,
                    kmin_bytes=5 * FRAME_BYTES, kmax_bytes=45 * FRAME_BYTES, pmax=0.01, flow_bytes=1 << 20,
                    duration_ns=50_000_000, dcqcn=params)
    return simulate(cfg)


def _incast(params: DcqcnParams, senders: int = 8) -> tuple[float, int, int]:
    r = _simulate(params, senders)
    return r.utilization, r.drops, r.completed


def _completion_jain(r: CcSimResult) -> float:
    """Jain's index of size / completion time, as sw.apps.incast_bench reports it (equal-size flows, one start)."""
    xs = [1 / f.completion_ns for f in r.flows if f.completion_ns]
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def test_host_dcqcn_runs_the_firmware_target_rule() -> None:
    p = _host_params()
    assert p.clamp_target_rate is DCQCN_CLAMP_TARGET_RATE is False
    assert p.line_rate_kbps == LINK_BPS // 1000 and p.rate_ai_kbps == 100_000, "rpg_ai_rate 100 Mb/s at 10 Gb/s"
    assert (p.byte_counter_bytes, p.rate_hai_kbps) == (10_000_000, 50_000), "the paper's B / NVIDIA rpg_hai_rate"
    slow = make_cc("dcqcn", 1_000_000_000)
    assert isinstance(slow, DcqcnRp) and slow.params.rate_ai_kbps == 10_000, "at most line / 100 per step"


def test_timer_only_increase_is_fairer_and_fuller_than_the_firmware_byte_counter() -> None:
    host = _simulate(_host_params())
    firmware_bc = _simulate(_host_params().replace(byte_counter_bytes=32_767, rate_ai_kbps=40_000))
    assert host.completed == firmware_bc.completed == 8 and host.drops == firmware_bc.drops == 0
    jain_host, jain_bc = _completion_jain(host), _completion_jain(firmware_bc)
    assert jain_host > jain_bc, f"host Jain {jain_host:.4f} vs byte counter 32767 B {jain_bc:.4f}"
    assert host.utilization > firmware_bc.utilization, f"{host.utilization:.3f} vs {firmware_bc.utilization:.3f}"


def test_larger_additive_step_refills_the_link_sooner() -> None:
    util_host, drops_host, done_host = _incast(_host_params())
    util_paper, drops_paper, done_paper = _incast(_host_params().replace(rate_ai_kbps=40_000))
    assert done_host == done_paper == 8 and drops_host == drops_paper == 0
    assert util_host > util_paper, f"R_AI 100 Mb/s {util_host:.3f} vs 40 Mb/s {util_paper:.3f}"


def test_host_dcqcn_timing_and_floor() -> None:
    p = _host_params()
    assert p.alpha_timer_ns == p.cnp_interval_ns == DCQCN_CNP_INTERVAL_NS == 4_000
    assert make_np().params.cnp_interval_ns == p.cnp_interval_ns, "the NIC's NP spaces CNPs as its RPs expect"
    assert p.min_rate_kbps * DCQCN_MIN_RATE_LINE_DIVISOR == p.line_rate_kbps == 10_000_000
    slow = make_cc("dcqcn", 1_000_000)  # 1 Mb/s line: the floor still a positive rate
    assert isinstance(slow, DcqcnRp) and slow.params.min_rate_kbps == 62


def test_unclamped_target_refills_the_link_faster_after_an_incast() -> None:
    util_host, drops_host, done_host = _incast(_host_params())
    util_paper, drops_paper, done_paper = _incast(_host_params().replace(clamp_target_rate=True))
    assert done_host == done_paper == 8 and drops_host == drops_paper == 0
    assert util_host > util_paper, f"host params {util_host:.3f} vs paper clamp {util_paper:.3f}"


def test_short_alpha_and_cnp_timing_with_floor_fills_the_link_better() -> None:
    # the paper's B and R_HAI on both sides: only the alpha/CNP timing and the floor differ
    paper_bc = _host_params().replace(byte_counter_bytes=10_000_000, rate_hai_kbps=100_000)
    util_host, drops_host, done_host = _incast(paper_bc)
    before = paper_bc.replace(alpha_timer_ns=55_000, cnp_interval_ns=50_000, min_rate_kbps=100_000)
    util_before, drops_before, done_before = _incast(before)
    assert done_host == done_before == 8 and drops_host == drops_before == 0
    assert util_host > util_before, f"host params {util_host:.3f} vs paper timing {util_before:.3f}"


def test_sixteen_to_one_incast_loses_nothing() -> None:
    util, drops, done = _incast(_host_params(), senders=16)
    assert drops == 0 and done == 16
    assert util > 0
