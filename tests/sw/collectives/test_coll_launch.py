"""The torchrun-style environment contract end to end: separate Python processes, each started only with
RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/STARPULSE_STORE, run the self-check (``python -m sw.collectives``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def _launch(tmp_path, servers: int, gpus: int, extra: dict[str, str] | None = None):
    procs = []
    for rank in range(servers * gpus):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(servers * gpus), LOCAL_RANK=str(rank % gpus),
                   LOCAL_WORLD_SIZE=str(gpus), STARPULSE_STORE=str(tmp_path / "store"), STARPULSE_TIMEOUT="30",
                   **(extra or {}))
        procs.append(subprocess.Popen([sys.executable, "-m", "sw.collectives"], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=90)
            outs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)
    return outs


def test_launched_ranks_find_each_other_and_pass_the_self_check(tmp_path) -> None:
    outs = _launch(tmp_path, 2, 2)
    for rank, (code, out, err) in enumerate(outs):
        assert code == 0, f"rank {rank}: {out}{err}"
        assert out.startswith(f"rank {rank}/4 server {rank // 2} gpu {rank % 2}: ok;"), out


def test_a_bad_environment_value_is_one_line_and_exit_2(tmp_path) -> None:
    code, out, err = _launch(tmp_path, 1, 1, {"STARPULSE_ALGO": "fastest"})[0]
    assert code == 2
    assert err.strip().startswith("error: $STARPULSE_ALGO='fastest': unknown algorithm 'fastest'")
    assert "Traceback" not in err
