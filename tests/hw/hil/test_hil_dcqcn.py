"""Hardware in the loop, DCQCN (issue 17 item 6b): the RTL NIC (Verilator) on host s0 of a P4 fabric (two leaves, a
spine) runs DCQCN at its line rate, which its limiter counts in payload bytes: ~1.3x the link on the wire, so its
leaf's uplink queues and marks CE (fabric.p4's RED).  The receiver on the other leaf (``sw.apps.hil.peer``, the
notification point) sends CNPs that cross the fabric back into the RTL's ``rx_s_axis``; the RTL's QP_RATE, read all
run long, equals ``sw.cc.DcqcnRp`` fed the CNPs' arrival clocks (bit for bit), nothing is dropped and nothing is
left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from hil_run import run_cc

# the first hil test builds the Verilator model (minutes on 2 busy cores; once per RTL source): a hang guard
pytestmark = [pytest.mark.hil, pytest.mark.timeout(3600)]


def test_cnps_through_the_fabric_cut_the_rtl_rate_as_the_golden_model(tmp_path: Path) -> None:
    from sw.cc import RateToIncrement

    out = run_cc(tmp_path, "dcqcn")       # 0.6 ms at 4 Gb/s; nothing left, every frame good, 0 drops
    rx, rtl = out["receiver"], out["rtl"]
    n = out["frames"]
    # the congested leaf marked CE; every CNP the receiver sent reached the RTL and was counted there
    assert rx["ce_frames"] >= 1 and rx["cnps_sent"] >= 1, rx
    assert rtl["cnp_received"] == len(rtl["cnp_arrival_cycles"]) == rx["cnps_sent"], (rtl["cnp_received"], rx)
    assert rtl["rx_icrc_errors"] == 0 and rtl["frames_tx"] == n
    replay = rtl["replay"]
    line = RateToIncrement().increment(rtl["dcqcn_params"]["line_rate_kbps"])
    assert min(inc for _, _, inc in replay["model_trace"]) < line, "no CNP cut the model's rate"
    reads = [r for r in rtl["rate_trace"] if r["qp_rate"] < line]
    assert reads, "no QP_RATE read saw the RTL's rate below its line rate"
    assert replay["compared"] >= 20 and replay["mismatches"] == [], replay["mismatches"]
    assert rtl["rate_trace_matches_model"] is True
    [sender] = out["senders"]
    assert sender["kind"] == "rtl" and sender["goodput_bps"] > 0 and out["jain"] == 1.0
