"""``starpulse run`` and ``starpulse bench`` end to end, each bringing up and tearing down its own small fabric
(2 servers x 2 GPUs x 1 spine)."""

from __future__ import annotations

import argparse
import contextlib
import json

import pytest

from emu import run_cli
from emu.net import leftovers
from sw.collectives import bench_cli

pytestmark = pytest.mark.emu

SMALL = ["--servers", "2", "--gpus", "2", "--spines", "1"]


@pytest.fixture(autouse=True)
def no_running_fabric(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path / "state"))   # never pick up someone's `fabric up`


def test_run_self_check_exit_code_and_clean_teardown(tmp_path, capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    parser = argparse.ArgumentParser()
    run_cli.add_arguments(parser)
    args = parser.parse_args([*SMALL, "--logdir", str(tmp_path / "logs"), "--timeout", "120", "--",
                              "python", "-m", "sw.collectives"])
    footprints = []
    real = run_cli.fabric_target

    @contextlib.contextmanager
    def recording(a, **kw):  # type: ignore[no-untyped-def]
        with real(a, **kw) as target:
            footprints.append(target.fabric.footprint)
            yield target

    monkeypatch.setattr(run_cli, "fabric_target", recording)
    code = run_cli.run(args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count(": ok;") == 4, out
    assert len(footprints) == 1 and leftovers(footprints[0]) == []


def test_bench_on_its_own_fabric_writes_the_json_contract(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    out_json = tmp_path / "bench.json"
    code = bench_cli.main(["allreduce", *SMALL, "-b", "16K", "-e", "64K", "-f", "4", "-n", "2", "-w", "1",
                           "-J", str(out_json), "--timeout", "180"])
    text = capsys.readouterr().out
    assert code == 0, text
    report = json.loads(out_json.read_text())
    assert report["mode"] == "fabric" and report["world_size"] == 4
    assert report["line_rate_bps"] == 100e6
    assert isinstance(report["drops"], int) and isinstance(report["ecn_marks"], int)
    assert [r["size_bytes"] for r in report["results"]] == [16384, 65536]
    for row in report["results"]:
        assert row["wrong"] == 0
        assert row["busbw_bps"] == pytest.approx(row["algbw_bps"] * 1.5)
        assert 0 < row["busbw_bps"]
    assert "# Out of bounds values : 0 OK" in text
