"""The demo's collectives plot (``sw.apps.demo_busbw_plot``) from real ``starpulse bench -J`` reports: the NVLink
stand-in's share of a hierarchical allreduce's busbw is the bytes the busiest NIC did not carry (2/3 on 2 servers x
2 GPUs: busbw counts 2(n-1)/n = 1.5 buffers per rank, the rail NIC moves 0.5), and the PNG is written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sw.apps import coll_bench, demo_busbw_plot

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def test_busbw_plot_splits_nic_and_nvlink_stand_in(tmp_path: Path) -> None:
    import json

    for op, algo in (("allreduce", "hier"), ("alltoall", "rail")):
        code = coll_bench.main([op, "--local", "--servers", "2", "--gpus", "2", "-b", "64K", "-e", "64K", "-n", "1",
                               "-w", "0", "-A", algo, "-J", str(tmp_path / f"bench_{op}.json")])
        assert code in (0, 3)   # 3: the load bent the figures (fidelity); the byte ratio below does not depend on it
    plot = demo_busbw_plot
    (hier,) = json.loads((tmp_path / "bench_allreduce.json").read_text())["results"]
    assert hier["algo"] == "hier" and hier["nic_frac_line"] == pytest.approx(hier["nic_bps"] / 1e8)
    assert plot.nvlink_share(hier) == pytest.approx(2 / 3, rel=1e-3)
    assert plot.nvlink_share({"busbw_bps": 5.0, "nic_bps": 5.0}) == 0.0
    done = subprocess.run([sys.executable, "-m", "sw.apps.demo_busbw_plot", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    png = tmp_path / plot.PNG_NAME
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
