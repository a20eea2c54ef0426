"""The default fabric's shape (4 servers x 2 GPUs) with multi-chunk buffers, every allreduce and all-to-all
algorithm against numpy, with the shared-memory and rail throttles on (slow: 8 processes, 5-30 s)."""

from __future__ import annotations

import numpy as np
import pytest

from sw.collectives import CommConfig
from sw.collectives.local import run_local

pytestmark = [pytest.mark.unit, pytest.mark.slow]


def _large(comm, count: int):
    n, me = comm.world_size, comm.rank
    fails = []
    rng = [np.random.default_rng([11, r]) for r in range(n)]
    ints = [g.integers(-(2**40), 2**40, count) for g in rng]
    floats = [g.uniform(-1, 1, count).astype(np.float32) for g in rng]
    want_i = np.sum(ints, axis=0)
    want_f = np.sum(np.array(floats, dtype=np.float64), axis=0)
    tol_f = n * 2.0**-23 * np.sum(np.abs(floats), axis=0)
    for algo in comm.tuner.available("allreduce"):
        got = comm.allreduce(ints[me].copy(), algo=algo)
        if not np.array_equal(got, want_i):
            fails.append(f"allreduce {algo} int64")
        got = comm.allreduce(floats[me].copy(), algo=algo)
        if np.any(np.abs(got - want_f) > tol_f):
            fails.append(f"allreduce {algo} float32")
    block = count // n
    want = np.concatenate([ints[src][me * block:(me + 1) * block] for src in range(n)])
    for algo in comm.tuner.available("alltoall"):
        got = comm.alltoall(ints[me][:n * block], np.zeros(n * block, np.int64), algo=algo)
        if not np.array_equal(got, want):
            fails.append(f"alltoall {algo}")
    return fails


def test_four_servers_two_rails_large_buffers() -> None:
    cfg = CommConfig(intra_rate_bps=8e9, inter_rate_bps=2e9, shm_ring_bytes=256 * 1024)
    for rank, fails in enumerate(run_local(4, 2, _large, 96_001, config=cfg, timeout_s=240)):
        assert not fails, f"rank {rank}: {fails}"
