"""A rank program on the communicator: allreduce, allgather, all-to-all, async handles, dtypes, a chosen algorithm.

    starpulse run --servers 2 --gpus-per-server 2 -- python examples/collectives_hello.py
"""

import sys

import numpy as np

from sw.collectives import (
    CollectiveTimeoutError,
    CollectiveUserError,
    CommAbortedError,
    PeerGoneError,
    bf16_to_f32,
    f32_to_bf16,
    init_from_env,
)


def main() -> None:
    comm = init_from_env()                     # RANK, WORLD_SIZE, LOCAL_RANK, ... from the launcher
    rank, n = comm.rank, comm.world_size

    grads = np.full(1000, rank + 1, dtype=np.float32)
    comm.allreduce(grads, op="sum")            # in place; ops: sum, prod, min, max, avg
    assert (grads == n * (n + 1) / 2).all()

    big = np.arange(1 << 16, dtype=np.int64) * (rank + 1)
    out = np.empty_like(big)
    comm.allreduce(big, out, op="max", algo="ring")     # out of place, algorithm chosen for this call
    assert (out == np.arange(1 << 16) * n).all() and comm.last_choice[0] == "ring"

    shard = np.full(4, rank, dtype=np.int32)
    gathered = np.empty(4 * n, dtype=np.int32)
    work = comm.allgather(shard, gathered, async_op=True)   # returns a Work handle at once
    norm = float(np.linalg.norm(grads))                      # ... overlap own work here ...
    work.wait()                                              # the result, or the operation's error
    assert (gathered == np.repeat(np.arange(n), 4)).all()

    send = (100 * rank + np.arange(2 * n)).astype(np.float16)  # block j (2 elements) goes to rank j
    recv = comm.alltoall(send, np.empty_like(send))
    assert (recv == [100 * j + 2 * rank + i for j in range(n) for i in range(2)]).all()

    half = f32_to_bf16(np.full(8, rank, dtype=np.float32))   # bfloat16 travels as uint16 bit patterns
    comm.allreduce(half, op="avg")
    assert (bf16_to_f32(half) == (n - 1) / 2).all()

    try:
        comm.allreduce(np.ones(4, dtype=np.int32), op="avg")  # avg needs a floating type
    except CollectiveUserError as exc:                       # bad call: nothing ran, comm still usable
        print(f"rank {rank}: refused as expected: {exc}")
    comm.barrier()
    print(f"rank {rank}/{n}: ok (norm {norm:g}; allreduce algorithms here: {comm.algorithms('allreduce')})")
    comm.close()


if __name__ == "__main__":
    try:
        main()
    except (CollectiveTimeoutError, PeerGoneError, CommAbortedError) as exc:   # a peer died or hung: give up
        sys.exit(f"collective failed: {exc}")
