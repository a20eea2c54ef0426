"""scripts/fidelity_bench.py (issue 16): a too-small dilation reports ``ok: false`` through the product's own JSON,
and the invariance table's verdicts (agree within 5 % only when both runs were ok)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import fidelity_bench  # noqa: E402


def _run(fid_ok: bool, k: float) -> dict:
    return {"fidelity": {"ok": fid_ok, "time_dilation": k}, "load": 1.0}


@pytest.mark.unit
def test_rows_compare_medians_of_runs_that_kept_up() -> None:
    def runs(ok_a: bool, ok_b: bool, n: int = 1) -> list[list[dict]]:
        return [[_run(ok_a, 1e4)] * n, [_run(ok_b, 2e4)] * n]

    row = fidelity_bench.compare("incast", "max queue", runs(True, True), [[100], [104]])
    assert row["invariant"] is True and row["rel_diff"] == pytest.approx(4 / 104, abs=1e-4)
    assert row["dilations"] == [1e4, 2e4]
    assert fidelity_bench.compare("x", "m", runs(True, True), [[100], [110]])["invariant"] is False
    assert fidelity_bench.compare("x", "m", runs(False, True), [[100], [100]])["invariant"] is None
    # three runs each: medians 200 and 205 agree although single runs scatter 20 %; the spread says how much
    scattered = fidelity_bench.compare("incast", "last completion", runs(True, True, 3), [[250, 200, 190],
                                                                                          [205, 230, 195]])
    assert scattered["values"] == [200, 205] and scattered["invariant"] is True
    assert scattered["spread"] == [0.3, pytest.approx(35 / 205, abs=1e-4)]
    assert fidelity_bench.compare("x", "m", [[_run(True, 1), _run(False, 1)], [_run(True, 2)] * 2],
                                  [[1, 1], [1, 1]])["invariant"] is None     # one run of the group not ok


@pytest.mark.emu
def test_a_too_small_dilation_reports_not_ok() -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "fidelity_bench.py"), "--small", "--only",
                          "too_small", "--json"], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    low = report["too_small"]
    assert low["dilation"] == 1.0 and low["reports_not_ok"] is True and low["fidelity"]["ok"] is False
    assert low["fidelity"]["worst_component"] is not None and report["rows"] == []


@pytest.mark.unit
def test_the_cpu_hog_burns_and_is_gone_after() -> None:
    import os
    import time

    with fidelity_bench.cpu_hog(2, 60.0) as pids:
        assert len(pids) == 2
        time.sleep(0.5)
        ticks = [int(Path(f"/proc/{pid}/stat").read_text().split()[13]) for pid in pids]   # utime
        assert all(t > 0 for t in ticks), ticks                # they burn CPU, not sleep
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.unit
def test_an_unknown_experiment_is_a_one_line_error() -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "fidelity_bench.py"), "--only", "allreduce,bogus"],
                         capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 2 and "unknown experiment(s) bogus" in out.stderr and "Traceback" not in out.stderr
