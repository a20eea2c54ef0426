"""``--time-dilation`` (issue 16): one parser for every command (bad values: one line, exit 2), and ``auto``
calibrating on the fabric: an impossible ceiling is a one-line error (exit 2), a sufficient one is chosen,
printed and recorded in the JSON with its fidelity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emu.calibrate import resolve_dilation
from sw.clock.lag import next_dilation
from sw.units import AutoDilation, UnitError, parse_time_dilation

REPO = Path(__file__).resolve().parents[2]
SMALL = ["--servers", "2", "--gpus", "1", "--spines", "1"]


def _run(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "STARPULSE_TIME_DILATION"}
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=timeout)



def _fid(k: float, p99_ns: int, bound_ns: int = 1000) -> dict:
    """A fidelity object as ``sw.clock.lag`` writes it, for a run at dilation ``k``."""
    return {"time_dilation": k, "bound_ns": bound_ns, "late_share": 0.3 if p99_ns > bound_ns else 0.0,
            "lag_p99_ns": p99_ns, "lag_max_ns": p99_ns, "worst_component": "nic 10.0.0.1 pacer",
            "ok": p99_ns <= bound_ns}


@pytest.mark.unit
def test_auto_reruns_a_run_whose_own_fidelity_was_not_ok(capsys: pytest.CaptureFixture[str]) -> None:
    """The calibration's choice is checked against the measured run: not ok → the run again at the dilation
    its lag asks for; ok → done; an explicit number, or the ceiling reached, is never raised."""
    from argparse import Namespace

    from emu.run_cli import rerun_until_faithful

    def job(args: Namespace, runs: list[float], needed: float):
        def once() -> tuple[str, list[dict | None]]:
            k = float(args.time_dilation) if not isinstance(args.time_dilation, AutoDilation) else 8.0
            runs.append(k)
            return f"result at {k:g}", [_fid(k, 1000 if k >= needed else 3000), None]
        return once

    args, runs = Namespace(time_dilation=AutoDilation(1000.0), name="sp-no-such-fabric"), []
    assert rerun_until_faithful(args, job(args, runs, needed=20)) == "result at 32"
    assert runs == [8.0, 32.0] and args.time_dilation == 32.0     # 8 * 3000/1000 * 1.5 = 36 → at most 4x
    assert "the run at 8 was not ok (nic 10.0.0.1 pacer 30.00 % of events later than" in capsys.readouterr().err
    args, runs = Namespace(time_dilation=AutoDilation(16.0), name="sp-no-such-fabric"), []
    assert rerun_until_faithful(args, job(args, runs, needed=1000)) == "result at 16"   # not ok at the ceiling
    assert runs == [8.0, 16.0]
    args, runs = Namespace(time_dilation=8.0, name="sp-no-such-fabric"), []
    assert rerun_until_faithful(args, job(args, runs, needed=1000)) == "result at 8"    # a number wins
    assert runs == [8.0]

@pytest.mark.unit
def test_one_parser_numbers_auto_and_ceilings() -> None:
    assert parse_time_dilation("50") == 50.0 and parse_time_dilation("auto") == AutoDilation()
    assert parse_time_dilation("AUTO:200") == AutoDilation(200.0)
    for bad in ("0", "-1", "abc", "nan", "inf", "", "auto:0", "auto:x", "auto:1e9", "1e9"):
        with pytest.raises(UnitError, match="--time-dilation"):
            parse_time_dilation(bad)
    assert resolve_dilation(7.0) == 7.0
    assert next_dilation(4.0, {"bound_ns": 100, "lag_p99_ns": 100}, 1000.0) == 8.0      # at least 2x
    assert next_dilation(4.0, {"bound_ns": 100, "lag_p99_ns": 10**6}, 1000.0) == 16.0   # at most 4x
    assert next_dilation(512.0, {"bound_ns": 100, "lag_p99_ns": 10**6}, 1000.0) == 1000.0
    marginal = {"bound_ns": 13_671, "lag_p99_ns": 21_503, "late_share": 0.0011}    # item 5's run at 256
    assert next_dilation(256.0, marginal, 4096.0) == 384.0                            # x1.5, not x2.36
    assert next_dilation(1.0, marginal, 4096.0) == 2.0                                # always up
    assert next_dilation(256.0, {**marginal, "late_share": 0.011}, 4096.0) == 604.0   # beyond marginal: the lag


@pytest.mark.unit
@pytest.mark.parametrize("module", [("sw.apps.coll_bench", "allreduce"), ("emu.run_cli",), ("emu.cli", "up"),
                                    ("sw.apps.perf_selftest", "--selftest"), ("sw.apps.incast_bench",),
                                    ("sw.apps.hol_bench",)])
def test_every_command_rejects_bad_dilations_in_one_line(module: tuple[str, ...]) -> None:
    for bad in ("-1", "auto:0"):                     # the parser's every case: the test above
        out = _run(*module, f"--time-dilation={bad}", timeout=60)
        lines = out.stderr.strip().splitlines()
        if module[0] in ("sw.apps.incast_bench", "sw.apps.hol_bench"):   # plain argparse: usage block, then the line
            lines = lines[-1:]
        assert out.returncode == 2 and len(lines) == 1, (module, bad, out.stderr)
        assert "--time-dilation" in lines[0] and repr(bad) in lines[0] and "Traceback" not in out.stderr


@pytest.mark.emu
def test_auto_with_an_impossible_ceiling_is_a_one_line_error() -> None:
    # 10 Gb/s at dilation 1 is ~850k frames/s: no Python switch keeps up, so a ceiling of 1 cannot suffice
    out = _run("sw.apps.coll_bench", "allreduce", *SMALL, "--link-rate", "10G", "-b", "16K", "-e", "16K",
               "--time-dilation", "auto:1")
    lines = [ln for ln in out.stderr.strip().splitlines() if "error" in ln]
    assert out.returncode == 2, out.stderr
    assert len(lines) == 1 and "not ok even at the ceiling 1" in lines[0] and "Traceback" not in out.stderr


@pytest.mark.emu
def test_auto_chooses_prints_and_records_a_dilation(tmp_path: Path) -> None:
    out_json = tmp_path / "bench.json"
    out = _run("sw.apps.coll_bench", "allreduce", *SMALL, "-b", "16K", "-e", "16K", "-n", "1", "-w", "0",
               "-J", str(out_json))                         # no --time-dilation: auto is the default
    assert out.returncode == 0, out.stderr
    chosen = [ln for ln in out.stderr.splitlines() if ln.startswith("time dilation auto: ") and "not ok" not in ln]
    assert len(chosen) == 1, out.stderr
    report = json.loads(out_json.read_text())
    k = float(chosen[0].split()[3])
    reruns = [ln for ln in out.stderr.splitlines() if "was not ok" in ln and "running it again at" in ln]
    if reruns:   # the measured run itself was not ok at the calibrated dilation: the last one it ran at
        k = float(reruns[-1].rsplit(" ", 1)[1])
    assert report["time_dilation"] == k and report["fidelity"]["time_dilation"] == k and 1 <= k <= 1000
    assert report["fidelity"]["ok"] or k == 1000, report["fidelity"]   # not ok only at the ceiling
