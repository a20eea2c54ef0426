"""Self-check for a launched job: every rank runs each collective with every algorithm on known data and
reports one line; ``python -m sw.collectives`` under ``starpulse run`` (or any torchrun-style launcher)."""

from __future__ import annotations

import sys

import numpy as np

from . import init_from_env
from .comm import Communicator


def check(comm: Communicator, count: int = 1001) -> list[str]:
    """Failures (empty when all good) of allreduce/broadcast/reduce/allgather/reducescatter/alltoall."""
    n, me = comm.world_size, comm.rank
    fails = []
    base = np.arange(count, dtype=np.int64)
    want_sum = base * n + n * (n - 1) // 2
    for algo in comm.tuner.available("allreduce"):
        x = base + me
        comm.allreduce(x, algo=algo)
        if not np.array_equal(x, want_sum):
            fails.append(f"allreduce {algo}")
    for algo in comm.tuner.available("broadcast"):
        x = base + me
        comm.broadcast(x, root=n - 1, algo=algo)
        if not np.array_equal(x, base + n - 1):
            fails.append(f"broadcast {algo}")
    for algo in comm.tuner.available("reduce"):
        out = np.zeros(count, np.int64)
        comm.reduce(base + me, out, root=0, algo=algo)
        if me == 0 and not np.array_equal(out, want_sum):
            fails.append(f"reduce {algo}")
    for algo in comm.tuner.available("allgather"):
        got = comm.allgather(base + me, algo=algo)
        if not np.array_equal(got, np.concatenate([base + r for r in range(n)])):
            fails.append(f"allgather {algo}")
    for algo in comm.tuner.available("reducescatter"):
        got = comm.reducescatter(np.tile(base, n) + me, algo=algo)
        if not np.array_equal(got, want_sum):
            fails.append(f"reducescatter {algo}")
    for algo in comm.tuner.available("alltoall"):
        send = np.repeat(np.arange(n, dtype=np.int64) * 1000 + me, count)  # block j carries (j, me)
        got = comm.alltoall(send, np.zeros_like(send), algo=algo)
        if not np.array_equal(got, np.repeat(me * 1000 + np.arange(n, dtype=np.int64), count)):
            fails.append(f"alltoall {algo}")
    comm.barrier()
    return fails


def main() -> int:
    try:
        comm = init_from_env()
    except Exception as exc:
        if getattr(exc, "is_user_error", False):
            print(f"error: {exc}", file=sys.stderr)
            return 2
        raise
    with comm:
        fails = check(comm)
        bytes_sent = comm.counters()
        status = "FAILED " + ", ".join(fails) if fails else "ok"
        print(f"rank {comm.rank}/{comm.world_size} server {comm.server} gpu {comm.local_rank}: {status}; "
              f"bytes sent intra={bytes_sent['intra']} rail={bytes_sent['rail']} cross={bytes_sent['cross']}",
              flush=True)
    return 1 if fails else 0
