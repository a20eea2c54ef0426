"""All-to-all: both schedules bitwise exact (odd block sizes, non-power-of-two worlds, every dtype, in place),
the same bytes per NIC with none of rail-aligned's crossing a spine, and the tuner's all-to-all choice."""

from __future__ import annotations

import numpy as np
import pytest

from sw.collectives.algorithms.alltoall import rail_alltoall
from sw.collectives.bootstrap import default_model
from sw.collectives.config import CommConfig
from sw.collectives.local import run_local
from sw.collectives.rank_layout import RankLayout
from sw.collectives.tuner import CostModel, LinkCost, Tuner

pytestmark = pytest.mark.unit

DTYPES = ("int32", "int64", "float16", "float32", "uint16")  # uint16 = bfloat16 bits


def _inputs(n: int, count: int, dtype: str) -> list[np.ndarray]:
    out = []
    for r in range(n):
        raw = np.random.default_rng([11, r, count]).integers(0, 2**63, count, dtype=np.int64)
        out.append(raw.astype(np.uint64).view(np.uint8)[: count * np.dtype(dtype).itemsize].view(dtype).copy())
    return out


def _exchange(comm, blocks: tuple[int, ...]) -> list[str]:
    """Every available algorithm, dtype and block size, out of place and in place; the mismatches found."""
    n, me = comm.world_size, comm.rank
    fails = []
    for algo in comm.tuner.available("alltoall"):
        for block in blocks:
            for dtype in DTYPES:
                ins = _inputs(n, n * block, dtype)
                want = np.concatenate([ins[src][me * block:(me + 1) * block] for src in range(n)])
                got = np.zeros_like(ins[me])
                comm.alltoall(ins[me], got, algo=algo)
                if got.tobytes() != want.tobytes():
                    fails.append(f"rank {me}: {algo} {dtype} block {block}")
                buf = ins[me].copy()
                comm.alltoall(buf, algo=algo)
                if buf.tobytes() != want.tobytes():
                    fails.append(f"rank {me}: {algo} {dtype} block {block} in place")
                if ins[me].tobytes() != _inputs(n, n * block, dtype)[me].tobytes():
                    fails.append(f"rank {me}: {algo} {dtype} modified the send buffer")
    return fails


@pytest.mark.parametrize("servers,gpus", [(3, 2), (2, 3), (5, 1), (1, 3), (2, (2, 1))])
def test_alltoall_bitwise_exact_for_odd_sizes_and_worlds(servers: int, gpus: int | tuple[int, ...]) -> None:
    results = run_local(servers, gpus, _exchange, (1, 7, 33), timeout_s=120)
    assert [f for r in results for f in r] == []


def _bytes_per_class(comm, block: int) -> dict[str, dict[str, int]]:
    out = {}
    x = np.arange(comm.world_size * block, dtype=np.int32)
    for algo in ("pairwise", "rail"):
        comm.barrier()
        comm.reset_counters()
        comm.alltoall(x, np.zeros_like(x), algo=algo)
        out[algo] = comm.counters()
    return out


def test_rail_aligned_moves_the_same_nic_bytes_and_none_across_rails() -> None:
    servers, gpus, block = 3, 2, 5
    results = run_local(servers, gpus, _bytes_per_class, block, timeout_s=120)
    blk = block * 4
    for got in results:
        pair, rail = got["pairwise"], got["rail"]
        assert pair == {"intra": blk * (gpus - 1), "rail": blk * (servers - 1),
                        "cross": blk * (gpus - 1) * (servers - 1)}
        assert rail["cross"] == 0
        assert rail["rail"] == pair["rail"] + pair["cross"] == blk * gpus * (servers - 1)  # the same NIC bytes
        assert rail["intra"] == blk * (gpus - 1) * servers  # the shuffle: S blocks to each local peer


def _traced(comm) -> tuple[int, int, bool]:
    n, me = comm.world_size, comm.rank
    ins = _inputs(n, n * 9, "int64")
    want = np.concatenate([ins[src][me * 9:(me + 1) * 9] for src in range(n)])
    got, trace = np.zeros_like(ins[me]), {}
    comm._submit("alltoall(traced)", comm._tag("alltoall", "int64"),
                 lambda: rail_alltoall(comm.net, ins[me], got, trace), False)
    return trace["staged_ns"], trace["end_ns"], bool(np.array_equal(got, want))


def test_rail_trace_reports_the_shuffle_before_the_end() -> None:
    for staged, end, exact in run_local(2, 2, _traced, timeout_s=60):
        assert exact and 0 <= staged <= end


def _tuner(intra_bps: float, inter_bps: float, cross_bps: float | None = None, servers: int = 4,
           gpus: int = 2) -> Tuner:
    intra, inter = LinkCost(20e-6, intra_bps), LinkCost(60e-6, inter_bps)
    cross = None if cross_bps is None else LinkCost(60e-6, cross_bps)
    return Tuner(RankLayout.grid(servers, gpus), CostModel(intra, inter, cross), env={})


def test_tuner_models_both_schedules_at_the_nic_bound_on_a_non_blocking_fabric() -> None:
    tuner = _tuner(9e8, 1e8)  # NVLink ~9x a NIC
    nbytes = 64 << 20
    nic_s = 8 * nbytes * 6 / 8 / 1e8  # (S-1)*G of n blocks through a 100 Mb/s NIC
    for algo in ("pairwise", "rail"):
        assert tuner.estimate_s("alltoall", algo, nbytes) == pytest.approx(nic_s, rel=1e-3)
    assert tuner.algo("alltoall", nbytes) == "rail"  # a tie: the spine-free schedule
    assert tuner.algo("alltoall", 64 << 10) == "rail"


def test_tuner_picks_rail_on_an_oversubscribed_spine_and_pairwise_with_slow_shared_memory() -> None:
    assert _tuner(9e8, 1e8, cross_bps=5e7).algo("alltoall", 64 << 20) == "rail"
    slow = _tuner(4e7, 1e8)  # shared memory slower than the NIC: the shuffle is the bottleneck
    assert slow.estimate_s("alltoall", "rail", 64 << 20) > 1.5 * slow.estimate_s("alltoall", "pairwise", 64 << 20)
    assert slow.algo("alltoall", 64 << 20) == "pairwise"
    assert _tuner(9e8, 1e8, servers=1, gpus=3).estimate_s("alltoall", "rail", 3 << 20) == pytest.approx(
        _tuner(9e8, 1e8, servers=1, gpus=3).estimate_s("alltoall", "pairwise", 3 << 20))


def test_tuner_default_model_and_environment_override_for_alltoall() -> None:
    layout = RankLayout.grid(4, 2)
    assert Tuner(layout, default_model(CommConfig()), env={}).algo("alltoall", 64 << 20) == "rail"
    env = {"STARPULSE_ALGO": "alltoall=pairwise"}
    assert Tuner(layout, default_model(CommConfig()), env=env).algo("alltoall", 64 << 20) == "pairwise"
    assert Tuner(RankLayout((0, 0, 1), (0, 1, 0)), default_model(CommConfig()), env={}).algo(
        "alltoall", 3 << 20) == "pairwise"  # uneven servers: rail-aligned cannot run


def _chunked(comm, block: int, chunk_bytes: int) -> list[object]:
    """Both schedules with an explicit chunk: exact, and the messages each sent per link class."""
    n, me = comm.world_size, comm.rank
    ins = _inputs(n, n * block, "int32")
    want = np.concatenate([ins[src][me * block:(me + 1) * block] for src in range(n)])
    out: list[object] = []
    for algo in ("pairwise", "rail"):
        got = np.zeros_like(ins[me])
        comm.barrier()
        comm.reset_counters()
        comm.alltoall(ins[me], got, algo=algo, chunk_bytes=chunk_bytes)
        out += [got.tobytes() == want.tobytes(), comm.message_counters(), comm.last_choice]
    return out


def test_alltoall_honours_the_chunk_size() -> None:
    block, chunk = 7, 12   # int32: chunks of 3 elements, 3 pieces per block
    for exact_p, msgs_p, choice_p, exact_r, msgs_r, choice_r in run_local(3, 2, _chunked, block, chunk, timeout_s=60):
        assert exact_p and exact_r
        assert choice_p == ("pairwise", chunk) and choice_r == ("rail", chunk)
        assert msgs_p == {"intra": 3, "rail": 2 * 3, "cross": 2 * 3}            # 1 local, 2 same-rail, 2 cross
        # rail-aligned: own 2 blocks and 2 relayed ones over the rail, 2 forwarded + 1 local block over shm
        assert msgs_r == {"intra": 2 * 3 + 1, "rail": 4 * 3, "cross": 0}


def test_the_tuner_chunks_all_to_all_from_the_block_size() -> None:
    tuner = _tuner(9e8, 1e8)
    small, large = tuner.chunk_bytes("alltoall", "rail", 64 * 1024), tuner.chunk_bytes("alltoall", "rail", 16 << 20)
    assert 4096 <= small < large <= 4 << 20
