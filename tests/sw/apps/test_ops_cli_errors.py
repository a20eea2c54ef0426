"""``starpulse ops``: bad input is one line naming the flag or the store, exit 2 (no fabric, no root)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sw.units.telemetry import TelemetryStore

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def _ops(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"STARPULSE_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "sw.cli", "ops", *argv], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=120)


@pytest.mark.parametrize(("argv", "needle"), [
    (["diagnose", "--name", "nosuchfabric"], "--name nosuchfabric: no running fabric"),
    (["watch", "--name", "nosuchfabric", "--count", "1"], "--name nosuchfabric: no running fabric"),
    (["diagnose", "--store", "EMPTY"], "the store has no steps yet"),
    (["diagnose", "--store", "MISSING"], "no telemetry store there"),
    (["diagnose", "--store", "EMPTY", "--calibrate", "3:1"], "--calibrate 3:1: expected A:B"),
    (["report", "OUT", "--name", "nosuchfabric"], "--name nosuchfabric: no running fabric"),
    (["report", "OUT", "--store", "EMPTY"], "the store has no steps yet"),
    (["report", "OUT", "--store", "MISSING"], "no telemetry store there"),
    (["campaign", "--faults", "0"], "--faults"),
    (["campaign", "--faults", "2", "--kinds", "slow_gpu,meteor"], "--kinds slow_gpu,meteor: unknown kind meteor"),
    (["campaign", "--faults", "2", "--backend", "bmv2"], "--kinds pfc_storm: needs --backend embedded"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, argv: list[str], needle: str) -> None:
    TelemetryStore(tmp_path / "empty.sqlite", create=True).close()
    argv = [{"EMPTY": str(tmp_path / "empty.sqlite"), "MISSING": str(tmp_path / "none.sqlite"),
             "OUT": str(tmp_path / "report.html")}.get(a, a) for a in argv]
    res = _ops(tmp_path, *argv)
    assert res.returncode == 2, res
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in res.stderr, res.stderr
