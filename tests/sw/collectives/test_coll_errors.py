"""Bad input gives one clear line (``is_user_error``); ranks that disagree or die give clear errors, not hangs."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from sw.collectives import (
    CollectiveMismatchError,
    CollectiveUserError,
    CommConfig,
    init_communicator,
    init_from_env,
)
from sw.collectives.local import RankFailure, run_local

pytestmark = pytest.mark.unit


@pytest.fixture
def solo(tmp_path):
    """A one-rank communicator in this process."""
    comm = init_communicator(0, 1, str(tmp_path / "store"), server=0, local_rank=0, env={})
    try:
        yield comm
    finally:
        comm.close()


def test_one_rank_collectives_are_identities(solo) -> None:
    x = np.arange(5, dtype=np.int32)
    assert np.array_equal(solo.allreduce(x.copy(), op="max"), x)
    assert np.array_equal(solo.allgather(x), x)
    assert np.array_equal(solo.reducescatter(x, op="sum"), x)
    assert np.array_equal(solo.alltoall(x, np.zeros_like(x)), x)
    y = np.zeros_like(x)
    solo.reduce(x, y, root=0)
    assert np.array_equal(y, x)
    f = np.array([1.5, -2.0], np.float32)
    assert np.array_equal(solo.allreduce(f.copy(), op="avg"), f)
    solo.barrier()


@pytest.mark.parametrize("call,match", [
    (lambda c: c.allreduce(np.zeros(3, np.float64)), r"dtype float64 is not supported \(allowed: float32"),
    (lambda c: c.allreduce([1, 2]), r"expected a numpy array, not list"),
    (lambda c: c.allreduce(np.zeros(3, np.float32), np.zeros(3, np.int32)), r"recvbuf: dtype int32 differs"),
    (lambda c: c.allreduce(np.zeros(3, np.float32), np.zeros(4, np.float32)), r"has 4 elements, expected 3"),
    (lambda c: c.allreduce(np.zeros(3, np.float32), op="mean"), r"op 'mean': unknown reduction"),
    (lambda c: c.allreduce(np.zeros(3, np.int64), op="avg"), r"'avg' is not defined for int64"),
    (lambda c: c.allreduce(np.zeros(3, np.float32), algo="fastest"), r"algo 'fastest': unknown for allreduce"),
    (lambda c: c.allreduce(np.zeros(3, np.float32), chunk_bytes=-1), r"chunk_bytes -1"),
    (lambda c: c.allreduce(np.zeros((4, 4), np.float32)[:, 1]), r"must be C-contiguous"),
    (lambda c: c.broadcast(np.zeros(3, np.float32), root=1), r"root 1: expected a rank in 0..0"),
    (lambda c: c.alltoall(np.zeros(3, np.float32), algo="ring"), r"algo 'ring': unknown for alltoall"),
    (lambda c: c.send(np.zeros(3, np.float32), peer=0), r"peer 0: a rank cannot send to or receive from itself"),
    (lambda c: c.recv(np.zeros(3, np.float32), peer=5), r"peer 5: expected a rank in 0..0"),
    (lambda c: c.recv(np.zeros(3, np.float32), peer="1"), r"peer '1': expected a rank"),
    (lambda c: (lambda a: c.allreduce(a[:4], a[2:6]))(np.zeros(8, np.float32)), r"partially overlaps sendbuf"),
])
def test_bad_calls_raise_one_clear_user_error(solo, call, match) -> None:
    with pytest.raises(CollectiveUserError, match=match) as info:
        call(solo)
    assert info.value.is_user_error
    assert "\n" not in str(info.value)
    solo.barrier()  # a rejected call leaves the communicator usable


@pytest.mark.parametrize("env,match", [
    ({}, r"\$RANK is not set"),
    ({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, r"\$RANK='x'"),
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"}, r"\$LOCAL_RANK=2: expected 0..1"),
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}, r"\$STARPULSE_STORE is not set"),
    ({"RANK": "3", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "STARPULSE_STORE": "/tmp/x"},
     r"RANK=3: expected 0..1"),
])
def test_bad_launch_environment_is_a_user_error(env, match) -> None:
    with pytest.raises(CollectiveUserError, match=match) as info:
        init_from_env(env)
    assert info.value.is_user_error


def test_init_from_env_reads_the_torchrun_contract(tmp_path) -> None:
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
           "STARPULSE_STORE": str(tmp_path), "STARPULSE_ALGO": "broadcast=tree", "STARPULSE_CHUNK_BYTES": "8K"}
    comm = init_from_env(env)
    try:
        assert (comm.rank, comm.world_size, comm.local_rank, comm.server) == (0, 1, 0, 0)
        comm.broadcast(np.zeros(3, np.float32))
        assert comm.last_choice == ("tree", 8192)
    finally:
        comm.close()
    env["STARPULSE_ALGO"] = "bogus"
    with pytest.raises(CollectiveUserError, match=r"\$STARPULSE_ALGO='bogus'"):
        init_from_env(env)


def _mismatched_counts(comm):
    x = np.zeros(10 + comm.rank, np.float32)  # every rank a different size
    try:
        comm.allreduce(x, algo="ring")
    except Exception as exc:  # the test looks at which rank saw what
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def test_ranks_with_different_sizes_get_a_mismatch_error_not_garbage() -> None:
    results = run_local(1, 2, _mismatched_counts, config=CommConfig(timeout_s=2), timeout_s=30)
    assert any("CollectiveMismatchError" in r and "different counts, dtypes" in r for r in results), results
    assert all(r.startswith(("CollectiveMismatchError", "CollectiveTimeoutError", "PeerGoneError"))
               for r in results), results


def _mismatched_dtypes(comm):
    x = np.zeros(8, np.float32 if comm.rank == 0 else np.int32)  # same byte size, different type
    try:
        comm.broadcast(x, root=0)
    except CollectiveMismatchError as exc:
        return type(exc).__name__
    return "no error"


def test_ranks_with_different_dtypes_get_a_mismatch_error() -> None:
    results = run_local(2, 1, _mismatched_dtypes, config=CommConfig(timeout_s=5), timeout_s=30)
    assert results[1] == "CollectiveMismatchError"


def _one_rank_leaves(comm):
    if comm.rank == 1:
        return "left"
    errors = []
    for _ in range(2):  # the first call fails on the dead peer, the next one refuses to run
        try:
            comm.allreduce(np.ones(1000, np.float32), algo="ring")
        except Exception as exc:
            errors.append(type(exc).__name__)
    return errors


@pytest.mark.parametrize("servers,gpus,first", [(2, 1, "PeerGoneError"), (1, 2, "PeerGoneError")])
def test_a_dead_peer_raises_instead_of_hanging(servers: int, gpus: int, first: str) -> None:
    results = run_local(servers, gpus, _one_rank_leaves, config=CommConfig(timeout_s=1.5), timeout_s=30)
    assert results[0] == [first, "CommAbortedError"]


def _one_rank_is_killed(comm):
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # no goodbye: only the process table tells
    try:
        comm.allreduce(np.ones(1000, np.float32), algo="ring")
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def test_a_killed_local_peer_is_detected_before_the_timeout() -> None:
    with pytest.raises(RankFailure, match=r"ranks \[1\] did not report") as info:
        run_local(1, 2, _one_rank_is_killed, config=CommConfig(timeout_s=20), timeout_s=60)
    assert info.value.results[0].startswith("PeerGoneError: rank 0: local rank 1 (pid ")
    assert info.value.results[0].endswith(") died")


def _raises(comm):
    raise ValueError(f"boom on rank {comm.rank}")


def test_local_runner_reports_rank_errors() -> None:
    with pytest.raises(RankFailure, match="rank 0: ValueError: boom on rank 0"):
        run_local(1, 2, _raises, timeout_s=30)


def _rail_algorithms_on_uneven_servers(comm):
    out = []
    for call in (lambda: comm.allreduce(np.ones(4, np.float32), algo="hier"),
                 lambda: comm.alltoall(np.ones(3, np.float32), algo="rail")):
        try:
            call()
            out.append("no error")
        except CollectiveUserError as exc:
            out.append(str(exc))
    comm.barrier()
    return out, comm.tuner.available("allreduce")


def test_rail_aware_algorithms_refuse_uneven_servers_clearly() -> None:
    for errors, available in run_local(2, (2, 1), _rail_algorithms_on_uneven_servers, timeout_s=30):
        assert errors[0].startswith("algo 'hier': cannot run allreduce on 3 ranks in this layout")
        assert errors[1].startswith("algo 'rail': cannot run alltoall")
        assert "hier" not in available


@pytest.mark.parametrize("exc", ["CollectiveTimeoutError", "PeerGoneError", "CommAbortedError"])
def test_a_failed_run_is_one_line_exit_1_not_an_internal_error(exc: str, capsys) -> None:
    """A peer that stopped answering fails the run (exit 1, one line), it is not a bug of ours (exit 70)."""
    import argparse

    import sw.collectives as coll
    from sw.units.cli_guard import EXIT_RUNTIME_FAILURE, call_guarded

    def run(_args: argparse.Namespace) -> int:
        raise getattr(coll, exc)("timed out after 60 s waiting for a receive from rank 12")

    assert call_guarded("starpulse train", run, argparse.Namespace()) == EXIT_RUNTIME_FAILURE == 1
    err = capsys.readouterr().err
    assert err == "starpulse train: failed: timed out after 60 s waiting for a receive from rank 12\n", err


@pytest.mark.parametrize("dilation", [1, 4, 20, 192, 288, 1000, 10_000, 150_000])
def test_the_qps_ack_timeout_stays_within_wall_bounds_at_any_dilation(dilation: float) -> None:
    """A lost tail is resent after 0.5-15 s of wall time at any dilation >= 1 (it was 103 s wall at 192, past the
    communicator's 60 s timeout), and the timer outlasts 64 ms of network time (a slow link's queue) where that
    fits; undilated, and faster than wall time, the timeout is the 17 it always was."""
    from sw.collectives.transport.roce import qp_timeout_for
    from sw.roce.transport.rules import ack_timeout_ns

    timeout = qp_timeout_for(dilation)
    wall_s = ack_timeout_ns(timeout) * dilation / 1e9
    assert 0.5 <= wall_s <= 15.0, (timeout, wall_s)
    if 64e-3 * dilation <= 15.0:
        assert ack_timeout_ns(timeout) >= 64_000_000, timeout
    else:                                   # the longest that fits the wall ceiling
        assert ack_timeout_ns(timeout + 1) * dilation / 1e9 > 15.0, timeout
    if dilation == 1:
        assert timeout == 17 == qp_timeout_for(0.1)
