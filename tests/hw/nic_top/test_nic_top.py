# amaranth: UnusedElaboratable=no
"""pytest wrapper: the NIC CC top level end to end (DCQCN, HPCC) on Icarus and Verilator (64-bit data path, 8 QPs)."""

from __future__ import annotations

import dataclasses
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from hwsim import SIM_BUILD, SIMULATORS, run_block
from int_ack_stim import SYNDROME_ACK, IntPath, ack_frame
from roce_tx_check import check_roce_pcap

from hw.int_ack import MAX_INT_HOPS
from hw.nic_top import NicCcTop
from sw.apps.hil.model import HilSizes, ensure_model
from sw.cc import DcqcnParams, HpccParams
from sw.roce import Opcode
from sw.roce.wire.int_md import DSCP_INT, strip_int
from sw.roce.wire.sample_pcaps import write_frames
from sw.units import ROCE_DATA_FRAME_OVERHEAD_BYTES

pytestmark = pytest.mark.sim

SIZES = {"data_width": 64, "n_qps": 8, "mtu_bytes": 64, "burst_bytes": 128}
# the DCQCN line rate a quarter of the 25.6 Gb/s data path, so two QPs never saturate it; 8 us timers; the
# byte counter at its maximum so only CNPs and timers move the rates the test reads back
DCQCN = DcqcnParams(line_rate_kbps=6_400_000, alpha_timer_ns=8_000, rate_timer_ns=8_000,
                    byte_counter_bytes=(1 << 32) - 1, cnp_interval_ns=1_600)


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_nic_top(simulator: str) -> None:
    dut = NicCcTop(**SIZES)
    figures = run_block(dut, toplevel="nic_cc_top", test_module="tb_nic_top", simulator=simulator, tag="w64q8",
                        params={**SIZES, "qp_bits": dut.qp_bits, "param_names": [p.name for p in dut.params],
                                "dcqcn": dataclasses.asdict(DCQCN), "cnp_interval_ns": DCQCN.cnp_interval_ns,
                                "ce_bursts": 30, "window_clocks": 2000, "seed": 4})
    print(f"\n{simulator}: {figures}")
    assert figures["cnp_requests"] > 5
    assert figures["rp"]["cnp2_rate_kbps"] == DCQCN.line_rate_kbps // 4


# HPCC at a quarter of the data path too; T = 4 us (W_max 3200 B, W_AI 25 B), max_stage 3 so additive runs end
HPCC = HpccParams(line_rate_kbps=6_400_000, base_rtt_ns=4_000, max_stage=3, min_rate_kbps=100_000,
                  rate_ai_kbps=50_000)
# rounds of doorbells + an ACK burst, the longest burst, seed (a short run on Icarus, a long one on Verilator)
HPCC_RUNS = {"icarus": (25, 6, 11), "verilator": (400, 8, 12)}


@pytest.mark.parametrize("simulator", SIMULATORS)
def test_nic_top_hpcc(simulator: str) -> None:
    rounds, burst, seed = HPCC_RUNS[simulator]
    dut = NicCcTop(**SIZES)
    unit = SIZES["mtu_bytes"] + ROCE_DATA_FRAME_OVERHEAD_BYTES
    # test_nic_top's design and tag: one build serves both testbenches
    figures = run_block(dut, toplevel="nic_cc_top", test_module="tb_nic_top_hpcc", simulator=simulator,
                        tag="w64q8", params={**SIZES, "qp_bits": dut.qp_bits,
                                             "param_names": [p.name for p in dut.params],
                                             "hpcc": dataclasses.asdict(HPCC), "qlen_unit_bytes": unit,
                                             "settle_clocks": dut.hpcc.cfg_settle_clocks, "qps": [1, 2, 5, 7],
                                             "rounds": rounds, "burst": burst, "seed": seed,
                                             "ack_clocks": dut.hpcc.ack_ii_clocks(MAX_INT_HOPS) + 8})
    print(f"\n{simulator}: {figures}")
    assert figures["mismatches"] == 0 and figures["hpcc_updates"] > 0


def test_int_ack_frames_decode_in_tshark_as_roce_acks(tmp_path: Path) -> None:
    """The INT-echo ACKs the HPCC test sends: tshark reads IPv4 with DSCP_INT to UDP 4791 of the length the INT
    stack adds, and, with the INT stripped as the host stack does, an RC Acknowledge with QP, PSN and AETH."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    rng = random.Random(3)
    cases = [(qp, rng.randrange(1 << 24), IntPath(rng, n, HPCC.line_rate_kbps, 122, 3200).next_records())
             for qp, n in ((1, 1), (2, 2), (5, 3), (7, 4), (3, 0))]
    frames = [ack_frame(qp, psn, records) for qp, psn, records in cases]
    write_frames(tmp_path / "int.pcap", frames)
    write_frames(tmp_path / "plain.pcap", [strip_int(f)[0] for f in frames])
    fields = ["-e", "ip.dsfield.dscp", "-e", "udp.dstport", "-e", "udp.length", "-e", "infiniband.bth.opcode",
              "-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn", "-e", "infiniband.aeth.syndrome"]
    rows = {}
    for name in ("int", "plain"):
        out = subprocess.run(["tshark", "-r", str(tmp_path / f"{name}.pcap"), "-T", "fields", "-E", "separator=,",
                              *fields], capture_output=True, text=True, timeout=60, check=True)
        rows[name] = [line.split(",") for line in out.stdout.splitlines()]
    assert len(rows["int"]) == len(rows["plain"]) == len(cases)
    for (qp, psn, records), frame, r_int, r_plain in zip(cases, frames, rows["int"], rows["plain"], strict=True):
        assert (int(r_int[0]), int(r_int[1]), int(r_int[2])) == (DSCP_INT, 4791, len(frame) - 34)
        assert int(r_plain[0]) != DSCP_INT and int(r_plain[2]) == len(frame) - 34 - 16 - 28 * len(records)
        assert (int(r_plain[3]), int(r_plain[4], 0), int(r_plain[5]), int(r_plain[6])) == \
            (Opcode.ACKNOWLEDGE, 0x200 + qp, psn, SYNDROME_ACK)


def test_hpcc_qlen_unit_resets_to_the_host_stacks_data_frame() -> None:
    """The INT occupancy unit after reset is the frame the host stack multiplies occupancies by (one constant in
    the leaf ``sw.units``, read by both)."""
    from sw.roce.transport import requester

    dut = NicCcTop(**SIZES)
    (unit,) = [p for p in dut.params if p.name == "hpcc_qlen_unit_bytes"]
    assert requester.ROCE_DATA_FRAME_OVERHEAD_BYTES is ROCE_DATA_FRAME_OVERHEAD_BYTES
    assert unit.reset == SIZES["mtu_bytes"] + ROCE_DATA_FRAME_OVERHEAD_BYTES


# the TX path needs the framer's 512 bits; MTU 256 B (5 beats a frame), 4 QPs, PSNs 1-3 frames before the wrap;
# the sizes of the hil model, whose Verilator build (tests/hw/hil) this test runs instead of building its own
TX_SIZES = dataclasses.asdict(HilSizes())


@pytest.mark.timeout(3600)   # on Verilator it builds the hil model if tests/hw/hil has not: a hang guard, not a target
@pytest.mark.parametrize("simulator", SIMULATORS)
def test_nic_top_tx_frames(simulator: str) -> None:
    """Doorbells -> scheduler -> framer -> ICRC: RoCEv2 frames byte-exact vs sw.roce, ICRC valid, read by tshark."""
    pcap = SIM_BUILD / f"nic_cc_top-tx-{simulator}.pcap"
    pcap.parent.mkdir(parents=True, exist_ok=True)
    pcap.unlink(missing_ok=True)
    dut = NicCcTop(**TX_SIZES)
    figures = run_block(dut, toplevel="nic_cc_top", test_module="tb_nic_top_tx", simulator=simulator, tag="w512q8-tx",
                        params={**TX_SIZES, "qp_bits": dut.qp_bits, "param_names": [p.name for p in dut.params],
                                "qps": [0, 3, 5, 6], "bytes": [3 * 256 + 64, 4, 3 * 256, 5 * 256 + 60],
                                "before_wrap": [1, 3, 2, 0], "pause": 0.2, "seed": 17, "pcap": str(pcap)},
                        prebuilt=ensure_model(HilSizes()) if simulator == "verilator" else None)
    print(f"\n{simulator}: {figures}")
    assert figures["wrapped"] == 3 and figures["interleaved"] > 4
    _, decoded = check_roce_pcap(pcap)
    if not decoded:
        pytest.skip("tshark is not installed: frames checked against sw.roce only")
