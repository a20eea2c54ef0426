"""Hardware in the loop, HPCC (issue 17 item 6c): the RTL NIC (Verilator) on host s0 of a P4 fabric (two leaves, a
spine) runs HPCC (cc_mode hpcc) from its line rate, a wire rate: with the INT stack its leaf adds, more than the
uplink carries, so its leaf's uplink queues. fabric.p4 stamps INT into its frames and leaves the stack to the
receiver (host sink mode); the receiver on the other leaf (``sw.apps.hil.peer``) answers every frame, but none sooner
after the last than twice the engine's time per ACK (``fabric_run.hpcc_ack_gap_ns``), with an RC ACK that echoes the
frame's INT hops, the fabric carries it back unchanged, and the RTL's INT-ACK parser, feeder and HPCC engine take it.
The engine's rate after every ACK, and every QP_RATE read all run long, equals ``sw.cc.Hpcc`` fed the same INT
records (read from the ACK frames as the host stack reads them), bit for bit; nothing is dropped and nothing is left
behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from hil_run import run_cc

# the first hil test builds the Verilator model (minutes on 2 busy cores; once per RTL source): a hang guard
pytestmark = [pytest.mark.hil, pytest.mark.timeout(3600)]


def test_int_echo_acks_through_the_fabric_drive_the_rtl_rate_as_the_golden_model(tmp_path: Path) -> None:
    from sw.cc import RateToIncrement

    out = run_cc(tmp_path, "hpcc")       # 0.6 ms at 4 Gb/s; nothing left, every frame good, 0 drops
    rx, rtl = out["receiver"], out["rtl"]
    n = out["frames"]
    assert rx["int_frames"] == n and rx["int_hop_counts"] == [3], "fabric.p4 stamped 3 hops into every frame"
    # every INT-echo ACK the receiver sent reached the RTL's parser, and the engine took each one
    assert rx["int_echoes_sent"] >= 20, rx
    assert rtl["int_acks"] == len(rtl["int_ack_arrival_cycles"]) == rx["int_echoes_sent"], (rtl["int_acks"], rx)
    assert rtl["int_acks_dropped"] == 0 and rtl["rx_icrc_errors"] == 0 and rtl["frames_tx"] == n
    replay = rtl["replay"]
    assert replay["acks"] == rtl["int_acks"] and replay["per_ack_matches"] is True, replay["first_divergence"]
    assert rtl["hpcc_updates"] >= 1 and rtl["hpcc_updates"] == sum(e["kind"] == 4 for e in rtl["hpcc_events"])
    line = RateToIncrement().increment(rtl["hpcc_params"]["line_rate_kbps"])
    assert min(inc for _, _, inc in replay["model_trace"]) < line, "no INT-echo ACK cut the model's rate"
    assert any(r["qp_rate"] < line for r in rtl["rate_trace"]), "no QP_RATE read saw the RTL's rate below line rate"
    assert replay["compared"] >= 20 and replay["mismatches"] == [], replay["mismatches"]
    assert rtl["rate_trace_matches_model"] is True
    [sender] = out["senders"]
    assert sender["kind"] == "rtl" and sender["goodput_bps"] > 0
