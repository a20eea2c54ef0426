"""NCCL-style collectives for StarPulse ranks: communicator, algorithms (ring, double binary tree, recursive
halving-doubling, hierarchical rail-aware, heterogeneous shm+network parallel, rail-aligned all-to-all), tuner,
online auto-tune, and shm/TCP/RoCE transports.

    comm = init_from_env()          # RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, STARPULSE_STORE
    comm.allreduce(grads, op="avg")
    work = comm.allgather(shard, out, async_op=True); ...; work.wait()

A complete rank program: ``examples/collectives_hello.py``; launch it with ``starpulse run [--local] --servers 2
--gpus-per-server 2 -- python examples/collectives_hello.py``.  ``help(Communicator)`` documents the calls and
their errors; ``DTYPES``, ``REDUCE_OPS`` and ``ALGOS`` list the element types, reductions and algorithms.

Environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (as torchrun), STARPULSE_STORE (fresh shared
directory per job), optional STARPULSE_SERVER (else GROUP_RANK, else RANK // LOCAL_WORLD_SIZE),
STARPULSE_NIC_ADDR (the rank's NIC address for TCP/RoCE, default 127.0.0.1), STARPULSE_ALGO ('ring' or
'allreduce=hier,alltoall=rail'), STARPULSE_CHUNK_BYTES, STARPULSE_TIMEOUT (s without progress),
STARPULSE_INTRA_RATE / STARPULSE_INTER_RATE (throttles, e.g. 20G or off), STARPULSE_SHM_BYTES (ring size),
STARPULSE_CALIBRATE=1 (measure the cost model at start-up), STARPULSE_NET (inter-server transport: tcp, the
library's default, or roce: RC QPs on the rail NIC, whose line rate is STARPULSE_INTER_RATE; ranks launched on a
fabric by ``starpulse run``/``bench`` get roce and the fabric's link rate), STARPULSE_ROCE_CC (dcqcn, hpcc or none),
STARPULSE_ROCE_BASE_RTT (the fabric's base round trip, part of HPCC's T; the launcher sets it),
STARPULSE_HETERO_SPLIT (0..1: the hierarchical share of a 'hetero' allreduce), STARPULSE_AUTOTUNE (on, off: the
default, or reset) and STARPULSE_AUTOTUNE_DIR (where the per-topology tuning tables live).
``python -m sw.collectives`` self-checks a job.
"""

from .bootstrap import init_communicator, init_from_env
from .comm import Communicator, Work
from .config import CommConfig
from .dtypes import DTYPES, REDUCE_OPS, bf16_to_f32, f32_to_bf16
from .errors import (
    CollectiveMismatchError,
    CollectiveTimeoutError,
    CollectiveUserError,
    CommAbortedError,
    PeerGoneError,
)
from .rank_layout import RankLayout
from .store import CollectiveStore
from .tuner import ALGOS

__all__ = [
    "ALGOS", "DTYPES", "REDUCE_OPS", "CollectiveMismatchError", "CollectiveStore", "CollectiveTimeoutError",
    "CollectiveUserError", "CommAbortedError", "CommConfig", "Communicator", "RankLayout", "PeerGoneError", "Work",
    "bf16_to_f32", "f32_to_bf16", "init_communicator", "init_from_env",
]
