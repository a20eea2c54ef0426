"""Hardware in the loop, DCQCN (issue 17 items 6b and 6d) on ``hil run``'s default fabric (two leaves of two servers, a
spine): the RTL NIC (Verilator) on host s0 runs DCQCN at its line rate, a wire rate, beside two software NICs (s1 on
its leaf, s3 on the receiver's) that WRITE as much to the same receiver s2: a 3-to-1 incast whose queues mark CE
(fabric.p4's RED). The RTL's receiver (``sw.apps.hil.peer``, its notification point) sends CNPs that cross the fabric
back into the RTL's ``rx_s_axis``; the RTL's QP_RATE, read all run long, equals ``sw.cc.DcqcnRp`` fed the CNPs'
arrival clocks (bit for bit), every software WRITE lands intact, nothing is dropped and nothing is left behind. 6d in
the same run (no second fabric): before the first doorbell the receiver's host sends the RTL's QP a CNP built by
``sw.roce`` with its ICRC corrupted; it reaches the RTL's link through the fabric, counts in RX_ICRC_ERRORS (read
through the host driver) and cuts no rate (QP_RATE and CNP_RECEIVED unchanged past the RTL's reaction time; the
replay, which has no CNP for it, still matches)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hil_run import run_cc

# the first hil test builds the Verilator model (minutes on 2 busy cores; once per RTL source): a hang guard
pytestmark = [pytest.mark.hil, pytest.mark.timeout(3600)]


def test_cnps_cut_the_rtl_rate_as_the_golden_model_and_a_bad_icrc_cnp_cuts_none(tmp_path: Path) -> None:
    from sw.cc import RateToIncrement

    # the default fabric, 0.6 ms at 4 Gb/s; nothing left, RTL frames good, 0 drops
    out = run_cc(tmp_path, "dcqcn", bad_icrc_probe=True, rtl_alone=False)
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
    # the incast: the RTL and two software senders, each of whose WRITE completed and landed intact
    assert {s["name"]: s["kind"] for s in out["senders"]} == {"s0": "rtl", "s1": "software", "s3": "software"}
    assert all(s["goodput_bps"] > 0 for s in out["senders"]) and 0 < out["jain"] <= 1
    *senders, receiver = out["software"]
    assert [(s["ok"], s["bytes"]) for s in senders] == [(True, n * rtl["mtu_bytes"])] * 2, senders
    assert receiver["role"] == "receiver" and receiver["data_ok"] == [True, True], receiver
