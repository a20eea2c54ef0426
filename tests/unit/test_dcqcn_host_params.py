"""The DCQCN parameters the host stack runs (sw.roce.pacer.make_cc) in sw.cc's closed-loop simulator: an 8 -> 1
incast of 1 MiB flows at 10 Gb/s with the DCQCN paper's ECN thresholds loses nothing, and the firmware's
unclamped target rate refills the link faster than the paper's clamp after the incast's burst of CNPs."""

from __future__ import annotations

import pytest

from sw.cc.dcqcn import DcqcnRp
from sw.cc.sim import SimConfig, simulate
from sw.roce.pacer import DCQCN_CLAMP_TARGET_RATE, make_cc

pytestmark = pytest.mark.unit

LINK_BPS = 10_000_000_000


def _incast(clamp: bool) -> tuple[float, int, int]:
    cc = make_cc("dcqcn", LINK_BPS)
    assert isinstance(cc, DcqcnRp)
    params = cc.params.replace(clamp_target_rate=clamp)
    cfg = SimConfig(n_flows=8, cc="dcqcn", link_kbps=LINK_BPS // 1000, buffer_bytes=2_000_000, kmin_bytes=5_000,
                    kmax_bytes=50_000, pmax=0.01, flow_bytes=1 << 20, duration_ns=50_000_000, dcqcn=params)
    r = simulate(cfg)
    return r.utilization, r.drops, r.completed


def test_host_dcqcn_runs_the_firmware_target_rule() -> None:
    cc = make_cc("dcqcn", LINK_BPS)
    assert isinstance(cc, DcqcnRp) and cc.params.clamp_target_rate is DCQCN_CLAMP_TARGET_RATE is False
    assert cc.params.line_rate_kbps == LINK_BPS // 1000 and cc.params.rate_ai_kbps == 40_000


def test_unclamped_target_refills_the_link_faster_after_an_incast() -> None:
    util_host, drops_host, done_host = _incast(DCQCN_CLAMP_TARGET_RATE)
    util_paper, drops_paper, done_paper = _incast(True)
    assert done_host == done_paper == 8 and drops_host == drops_paper == 0
    assert util_host > util_paper, f"host params {util_host:.3f} vs paper clamp {util_paper:.3f}"
