"""Hardware in the loop, DCQCN (issue 17 items 6b and 6d): the RTL NIC (Verilator) on host s0 of a P4 fabric (two
leaves, a spine) runs DCQCN at its line rate, a wire rate: it fills its link, and the INT stack its leaf adds puts the
uplink above its rate, so the uplink queues and marks CE (fabric.p4's RED).  The receiver on the other leaf
(``sw.apps.hil.peer``, the notification point) sends CNPs that cross the fabric back into the RTL's ``rx_s_axis``;
the RTL's QP_RATE, read all run long, equals ``sw.cc.DcqcnRp`` fed the CNPs' arrival clocks (bit for bit), nothing is
dropped and nothing is left behind.  6d in the same run (no second fabric): before the first doorbell the
receiver's host sends the RTL's QP a CNP built by ``sw.roce`` with its ICRC corrupted; it reaches the RTL's link
through the fabric, counts in RX_ICRC_ERRORS (read through the host driver) and cuts no rate (QP_RATE and
CNP_RECEIVED unchanged past the RTL's reaction time; the replay, which has no CNP for it, still matches)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hil_run import run_cc

# the first hil test builds the Verilator model (minutes on 2 busy cores; once per RTL source): a hang guard
pytestmark = [pytest.mark.hil, pytest.mark.timeout(3600)]


def test_cnps_cut_the_rtl_rate_as_the_golden_model_and_a_bad_icrc_cnp_cuts_none(tmp_path: Path) -> None:
    from sw.cc import RateToIncrement

    out = run_cc(tmp_path, "dcqcn", bad_icrc_probe=True)   # 0.6 ms at 4 Gb/s; nothing left, frames good, 0 drops
    rx, rtl = out["receiver"], out["rtl"]
    line = RateToIncrement().increment(rtl["dcqcn_params"]["line_rate_kbps"])
    # 6d: the bad-ICRC CNP was counted and dropped: no CNP counted, the rate still the line rate QP_INIT set
    probe = rtl["bad_icrc_probe"]
    assert probe["before"] == {"RX_ICRC_ERRORS": 0, "CNP_RECEIVED": 0, "QP_RATE": line}, probe
    assert probe["after"] == {"RX_ICRC_ERRORS": 1, "CNP_RECEIVED": 0, "QP_RATE": line}, probe
    n = out["frames"]
    # the congested leaf marked CE; every CNP the receiver sent reached the RTL and was counted there
    assert rx["ce_frames"] >= 1 and rx["cnps_sent"] >= 1, rx
    assert rtl["cnp_received"] == len(rtl["cnp_arrival_cycles"]) == rx["cnps_sent"], (rtl["cnp_received"], rx)
    assert rtl["rx_icrc_errors"] == 1 and rtl["frames_tx"] == n     # the probe's frame only
    replay = rtl["replay"]
    assert min(inc for _, _, inc in replay["model_trace"]) < line, "no CNP cut the model's rate"
    reads = [r for r in rtl["rate_trace"] if r["qp_rate"] < line]
    assert reads, "no QP_RATE read saw the RTL's rate below its line rate"
    assert replay["compared"] >= 20 and replay["mismatches"] == [], replay["mismatches"]
    assert rtl["rate_trace_matches_model"] is True
    [sender] = out["senders"]
    assert sender["kind"] == "rtl" and sender["goodput_bps"] > 0 and out["jain"] == 1.0
