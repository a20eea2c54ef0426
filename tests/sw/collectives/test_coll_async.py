"""Async handles, point-to-point, calibration and environment overrides on real multi-rank jobs."""

from __future__ import annotations

import numpy as np
import pytest

from sw.collectives import CommConfig
from sw.collectives.local import run_local

pytestmark = pytest.mark.unit


def _async_ops(comm):
    n, me = comm.world_size, comm.rank
    a = np.full(1001, me + 1, np.int64)
    b = np.arange(13, dtype=np.float32) + me
    gathered = np.zeros(n * 13, np.float32)
    works = [comm.allreduce(a, op="sum", async_op=True, chunk_bytes=256),
             comm.allgather(b, gathered, async_op=True),
             comm.barrier(async_op=True)]
    works[2].wait(timeout_s=30)  # issue order is execution order: the earlier ones are done too
    done_early = [w.is_completed() for w in works]
    for w in reversed(works):
        w.wait(timeout_s=30)
    ok = bool(np.all(a == n * (n + 1) // 2)) and np.array_equal(
        gathered, np.concatenate([np.arange(13, dtype=np.float32) + r for r in range(n)]))
    return done_early, ok


def test_async_handles_complete_in_issue_order_with_correct_results() -> None:
    for done_early, ok in run_local(2, 2, _async_ops, timeout_s=60):
        assert done_early == [True, True, True]
        assert ok


def _ring_exchange(comm):
    n, me = comm.world_size, comm.rank
    out = np.arange(50_000, dtype=np.int32) * (me + 1)  # larger than a shm ring: needs eager buffering
    got = np.zeros_like(out)
    send = comm.send(out, (me + 1) % n, async_op=True)  # everyone sends first: must not deadlock
    comm.recv(got, (me - 1) % n)
    send.wait(timeout_s=30)
    return bool(np.array_equal(got, np.arange(50_000, dtype=np.int32) * ((me - 1) % n + 1)))


@pytest.mark.parametrize("servers,gpus", [(1, 3), (3, 1)])
def test_send_recv_around_a_ring(servers: int, gpus: int) -> None:
    assert run_local(servers, gpus, _ring_exchange, config=CommConfig(shm_ring_bytes=65536), timeout_s=60) \
        == [True] * (servers * gpus)


def _calibrated(comm):
    m = comm.tuner.model
    return [m.intra.alpha_s, m.intra.rate_bps, m.inter.alpha_s, m.inter.rate_bps, m.cross_link.rate_bps]


def test_calibration_measures_every_link_class_and_all_ranks_agree() -> None:
    results = run_local(2, 2, _calibrated, config=CommConfig(calibrate=True, intra_rate_bps=2e9), timeout_s=60)
    assert all(r == results[0] for r in results)
    assert all(v > 0 for v in results[0])
    assert results[0] != _calibrated_defaults()


def _calibrated_defaults() -> list[float]:
    from sw.collectives.bootstrap import default_model
    m = default_model(CommConfig(intra_rate_bps=2e9))
    return [m.intra.alpha_s, m.intra.rate_bps, m.inter.alpha_s, m.inter.rate_bps, m.cross_link.rate_bps]


def _env_choice(comm):
    x = np.ones(10_000, np.float32)
    comm.allreduce(x)
    first = comm.last_choice
    comm.allreduce(x, algo="ring", chunk_bytes=4096)
    return first, comm.last_choice, float(x[0])


def test_environment_overrides_the_tuner_and_calls_override_the_environment() -> None:
    env = {"STARPULSE_ALGO": "allreduce=tree", "STARPULSE_CHUNK_BYTES": "2K"}
    for first, second, value in run_local(2, 2, _env_choice, env=env, timeout_s=60):
        assert first == ("tree", 2048)
        assert second == ("ring", 4096)
        assert value == 16.0
