"""``starpulse run`` and ``starpulse bench`` end to end, each bringing up and tearing down its own small fabric
(2 servers x 2 GPUs x 1 spine)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from emu import run_cli
from emu.net import leftovers
from sw.apps import coll_bench

pytestmark = pytest.mark.emu

REPO = str(Path(__file__).resolve().parents[2])
SMALL = ["--servers", "2", "--gpus", "2", "--spines", "1"]


@pytest.fixture(autouse=True)
def no_running_fabric(tmp_path, monkeypatch):
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path / "state"))   # never pick up someone's `fabric up`
    monkeypatch.setenv("STARPULSE_TIME_DILATION", "1")   # as before auto became the default (tested on its own)
    monkeypatch.delenv("STARPULSE_ROCE_CC", raising=False)   # the default congestion control


def test_run_self_check_exit_code_and_clean_teardown(tmp_path, capsys, monkeypatch) -> None:
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    args = parser.parse_args([*SMALL, "--logdir", str(tmp_path / "logs"), "--timeout", "120", "--",
                              "python", "-m", "sw.collectives"])
    footprints = []
    real = run_cli.fabric_target

    @contextlib.contextmanager
    def recording(a, **kw):
        with real(a, **kw) as target:
            footprints.append(target.fabric.footprint)
            yield target

    monkeypatch.setattr(run_cli, "fabric_target", recording)
    code = run_cli.run(args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count(": ok;") == 4, out
    assert len(footprints) == 1 and leftovers(footprints[0]) == []


def test_bench_on_its_own_fabric_writes_the_json_contract(tmp_path, capsys) -> None:
    out_json = tmp_path / "bench.json"
    code = coll_bench.main(["allreduce", *SMALL, "-b", "16K", "-e", "64K", "-f", "4", "-n", "2", "-w", "1",
                           "-J", str(out_json), "--timeout", "180"])
    text = capsys.readouterr().out
    assert code == 0, text
    report = json.loads(out_json.read_text())
    assert report["mode"] == "fabric" and report["world_size"] == 4
    assert report["net"] == "roce"                      # a fabric's ranks talk RoCE unless told otherwise
    assert report["roce_cc"] == "dcqcn"                 # their QPs' congestion control, the default
    assert report["line_rate_bps"] == 100e6
    assert isinstance(report["drops"], int) and isinstance(report["ecn_marks"], int)
    fid = report["fidelity"]
    assert list(fid) == ["time_dilation", "bound_ns", "late_share", "lag_p99_ns", "lag_max_ns", "worst_component",
                         "ok"]
    assert fid["worst_component"] is not None and isinstance(fid["ok"], bool)   # components did report events
    assert [r["size_bytes"] for r in report["results"]] == [16384, 65536]
    for row in report["results"]:
        assert row["wrong"] == 0
        assert row["busbw_bps"] == pytest.approx(row["algbw_bps"] * 1.5)
        assert 0 < row["busbw_bps"]
    assert "# Out of bounds values : 0 OK" in text


def test_sigterm_stops_ranks_and_tears_the_fabric_down(tmp_path) -> None:
    script = "import os,time;print('pid',os.getpid(),flush=True);time.sleep(300)"
    env = {**os.environ, "STARPULSE_STATE_DIR": str(tmp_path / "state")}
    proc = subprocess.Popen([sys.executable, "-m", "emu.run_cli", "--servers", "2", "--gpus", "1", "--spines", "0",
                             "--", "python", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=REPO)
    pids: list[int] = []
    try:
        assert proc.stdout is not None
        while len(pids) < 2:
            line = proc.stdout.readline()
            assert line, f"launcher ended early: {proc.stderr.read() if proc.stderr else ''}"
            if " pid " in line:
                pids.append(int(line.split()[-1]))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert proc.returncode == 130, err
    assert "fabric down" in err, err
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"rank pid {pid} outlived the launcher"
