"""Byte counters per link class: the hierarchical rail-aware allreduce keeps every inter-server byte on its
rail, where a flat ring in naive rank order sends a share of them between rails (through the spines).

For S servers x R GPUs (= rails), n = S*R ranks and B bytes per rank, the ring's S server-boundary hops
(server s, GPU R-1) -> (server s+1, GPU 0) are cross-rail and each carries 2(n-1)/n * B; hierarchical sends
2(S-1)/S * B/R per rank over its rail and nothing across rails: a cut of at least (R-1)/R.
"""

from __future__ import annotations

import numpy as np
import pytest

from sw.collectives.local import run_local

pytestmark = pytest.mark.unit


def _bytes_by_algorithm(comm, count: int):
    out = {}
    for algo in ("ring", "hier"):
        x = np.ones(count, np.float32)
        comm.reset_counters()
        comm.allreduce(x, algo=algo)
        assert x[0] == comm.world_size
        out[algo] = comm.counters()
    return out


@pytest.mark.parametrize("servers,rails", [(3, 2), (2, 4)])
def test_hierarchical_allreduce_cuts_cross_rail_bytes_by_at_least_r_minus_1_over_r(servers: int, rails: int) -> None:
    n = servers * rails
    count = n * rails * 50
    size_bytes = 4 * count
    per_rank = run_local(servers, rails, _bytes_by_algorithm, count, timeout_s=120)
    total = {algo: {k: sum(r[algo][k] for r in per_rank) for k in ("intra", "rail", "cross")}
             for algo in ("ring", "hier")}
    assert total["ring"]["cross"] == servers * 2 * (n - 1) * size_bytes // n
    assert total["hier"]["cross"] == 0
    assert total["hier"]["cross"] <= total["ring"]["cross"] * (1 - (rails - 1) / rails)
    assert total["hier"]["rail"] == n * 2 * (servers - 1) * size_bytes // (servers * rails)
    inter = {algo: total[algo]["rail"] + total[algo]["cross"] for algo in total}
    assert inter["hier"] < inter["ring"]
    print(f"\n{servers}x{rails}, {size_bytes} B/rank: ring {total['ring']}, hier {total['hier']}")


def _ring_messages(comm, count: int, chunk_bytes: int):
    x = np.arange(count, dtype=np.int32)
    comm.reset_counters()
    comm.allreduce(x, algo="ring", chunk_bytes=chunk_bytes)
    assert np.array_equal(x, np.arange(count, dtype=np.int32) * comm.world_size)
    return comm.message_counters()["intra"], comm.counters()["intra"]


def test_ring_pipelines_each_segment_in_chunks() -> None:
    n, count, chunk_bytes = 3, 3 * 1000, 1024  # segments of 1000 int32 = 4000 B -> 4 chunks each
    for messages, size_bytes in run_local(1, n, _ring_messages, count, chunk_bytes, timeout_s=60):
        assert messages == 2 * (n - 1) * 4
        assert size_bytes == 2 * (n - 1) * 4000
