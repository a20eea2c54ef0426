"""``starpulse bench --local``: the nccl-tests table, busbw factors, JSON contract keys and exact results, with
every rank forked on this box (no fabric); bad flags give one clear line naming the flag."""

from __future__ import annotations

import json

import pytest

from sw.apps import coll_bench
from sw.collectives.bench import BenchParams, CollBenchError, bus_factor, element_count, sweep_bytes

pytestmark = pytest.mark.unit

COLUMNS = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong")


def _bench(tmp_path, capfd, *flags: str) -> tuple[int, dict, str]:
    out_json = tmp_path / "out.json"
    code = coll_bench.main([*flags, "--local", "--servers", "2", "--gpus", "2", "-n", "2", "-w", "1",
                           "-J", str(out_json)])
    text = capfd.readouterr().out
    return code, json.loads(out_json.read_text()), text


def test_bus_factors_are_the_nccl_tests_ones() -> None:
    assert bus_factor("allreduce", 8) == pytest.approx(2 * 7 / 8)
    for op in ("allgather", "reducescatter", "alltoall"):
        assert bus_factor(op, 8) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", 8) == 1.0 and bus_factor("reduce", 8) == 1.0


def test_sweep_and_counts() -> None:
    assert sweep_bytes(8 * 1024, 64 * 1024, 2) == [8192, 16384, 32768, 65536]
    assert sweep_bytes(1000, 1000, 2) == [1000]
    assert element_count("alltoall", 1000, 4, 3) == 249      # 250 elements rounded down to a multiple of 3
    assert element_count("allreduce", 2, 4, 3) == 1


def test_allreduce_table_json_and_factor(tmp_path, capfd) -> None:
    code, report, text = _bench(tmp_path, capfd, "allreduce", "-b", "8K", "-e", "32K", "-f", "4")
    assert code == 0, text
    header = next(line for line in text.splitlines() if "size" in line and "busbw" in line)
    for col in COLUMNS:
        assert col in header, header
    assert header.count("busbw") == 3 and header.count("#wrong") == 2   # out-of-place, in-place, busbw/line
    assert "in-place" in text and "out-of-place" in text
    for key in ("line_rate_bps", "drops", "ecn_marks", "results"):
        assert key in report
    assert report["line_rate_bps"] == 100e6
    assert list(report["fidelity"]) == ["time_dilation", "bound_ns", "late_share", "lag_p99_ns", "lag_max_ns",
                                        "worst_component", "ok"]
    assert report["fidelity"]["worst_component"].startswith("throttle pid ")   # the ranks' shm throttles
    sizes = [r["size_bytes"] for r in report["results"]]
    assert sizes == [8192, 32768]
    for row in report["results"]:
        for key in ("busbw_bps", "algbw_bps", "wrong"):
            assert key in row
        assert row["wrong"] == 0
        assert row["busbw_bps"] == pytest.approx(row["algbw_bps"] * 2 * 3 / 4)
        assert row["algbw_bps"] == pytest.approx(8 * row["size_bytes"] / (row["time_us"] * 1e-6))
        assert row["busbw_frac_line"] == pytest.approx(row["busbw_bps"] / 100e6)
    rows = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    assert len(rows) == 2 and rows[0].split()[:5] == ["8192", "2048", "float32", "sum", "-1"]


@pytest.mark.parametrize(("op", "flags", "factor"), [
    ("alltoall", ("-d", "int32", "-A", "pairwise"), 3 / 4),
    ("reducescatter", ("-d", "bfloat16", "-o", "max"), 3 / 4),
    ("reduce", ("-d", "int64", "-o", "prod", "-r", "3", "-A", "tree"), 1.0),
])
def test_other_ops_are_exact(tmp_path, capfd, op, flags, factor) -> None:
    code, report, text = _bench(tmp_path, capfd, op, "-b", "4000", "-e", "4000", *flags)
    assert code == 0, text
    (row,) = report["results"]
    assert row["wrong"] == 0 and row["in_place"]["wrong"] == 0
    assert row["busbw_bps"] == pytest.approx(row["algbw_bps"] * factor)
    assert report["op"] == op and report["wrong"] == 0
    if "-A" in flags:                                   # the forced algorithm is the one reported per size
        assert row["algo"] == flags[flags.index("-A") + 1] == report["algo"]


@pytest.mark.parametrize(("argv", "needle"), [
    (["allreduce", "-b", "8X"], "-b '8X'"),
    (["allreduce", "-b", "64K", "-e", "8K"], "-e 8192: must be >= -b 65536"),
    (["allreduce", "-o", "mean"], "-o mean: allowed sum, prod, min, max, avg"),
    (["allreduce", "-d", "double"], "-d double: allowed"),
    (["allreduce", "-n", "0"], "-n/--iters: '0': must be an integer within 1..1000000"),
    (["allreduce", "-c", "2"], "-c 2: expected 0 or 1"),
    (["gather"], "op 'gather': allowed allreduce"),
    (["broadcast", "-r", "4"], "-r 4: must be a rank in 0..3"),
    (["allreduce", "-d", "int32", "-o", "avg"], "-o avg: not defined for -d int32"),
])
def test_bad_flags_give_one_clear_line(capfd, argv, needle) -> None:
    try:
        code = coll_bench.main([*argv, "--local", "--servers", "2", "--gpus", "2"])
    except SystemExit as exc:   # argparse's own one-line error (a value out of the flag's range)
        code = exc.code
    err = capfd.readouterr().err
    assert code == 2
    assert needle in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


def test_params_reject_bad_values_directly() -> None:
    with pytest.raises(CollBenchError, match="-f 1"):
        BenchParams(min_bytes=8, max_bytes=64, factor=1)
    assert CollBenchError.is_user_error is True
