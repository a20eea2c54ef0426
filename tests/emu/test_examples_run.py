"""The README's example programs run as a user runs them: ``starpulse run`` brings up a small fabric, runs every
rank in its server's namespace and tears the fabric down (the collective one over RoCE on 2 servers x 2 GPUs, the
RDMA WRITE/READ one between two hosts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]


def _starpulse_run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STARPULSE_STATE_DIR": str(tmp_path / "state"),   # never pick up someone's `fabric up`
           "STARPULSE_TIMEOUT": "60"}
    return subprocess.run([sys.executable, "-m", "sw.cli", "run", "--spines", "1", "--timeout", "150", *argv],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=200)


def test_collective_example_on_a_fabric(tmp_path) -> None:
    done = _starpulse_run(tmp_path, "--servers", "2", "--gpus-per-server", "2", "--",
                          "python", "examples/collectives_hello.py")
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in range(4):
        assert f"[rank {rank}] rank {rank}/4: ok" in done.stdout, done.stdout
    assert "fabric down" in done.stderr


def test_rdma_example_between_two_fabric_hosts(tmp_path) -> None:
    done = _starpulse_run(tmp_path, "--servers", "2", "--gpus-per-server", "1", "--",
                          "python", "examples/rdma_write_read.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[rank 0] rank 0: 65536 bytes verified" in done.stdout, done.stdout
    assert "[rank 1] rank 1: 65536 bytes verified" in done.stdout, done.stdout
    assert "on s0-eth0" in done.stdout and "on s1-eth0" in done.stdout, done.stdout


def test_rdma_example_started_by_hand_from_the_mininet_cli(tmp_path) -> None:
    """The README's Mininet CLI lines, as written there (store and interpreter swapped for the test's own)."""
    readme = (REPO / "README.md").read_text()
    lines = [line.removeprefix("mininet> ") for line in readme.splitlines()
             if line.startswith("mininet> ") and "rdma_write_read.py" in line or line == "mininet> s0 wait"]
    assert len(lines) == 3, lines
    script = "".join(line.replace("/tmp/rv", str(tmp_path / "rv")).replace(".venv/bin/python", sys.executable) + "\n"
                     for line in lines) + "exit\n"
    env = {**os.environ, "STARPULSE_STATE_DIR": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "sw.cli", "fabric", "up", "--servers", "2", "--gpus-per-server",
                           "1", "--spines", "1", "--cli", "--name", f"ex{os.getpid()}"], input=script, cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=200)
    shown = done.stdout + done.stderr   # the shell shows a node command's output on either stream
    assert done.returncode == 0, shown
    assert "rank 0: 65536 bytes verified" in shown, shown
    assert "rank 1: 65536 bytes verified" in shown, shown
