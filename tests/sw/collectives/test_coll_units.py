"""In-process pieces of the collectives: bfloat16 rounding, schedules' index maths, tuner and env parsing,
the file store, layouts, the framed stream over shared-memory rings, and the throttle."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest

from sw.clock import ManualClock
from sw.collectives import (
    CollectiveMismatchError,
    CollectiveStore,
    CollectiveTimeoutError,
    CollectiveUserError,
    RankLayout,
)
from sw.collectives.algorithms.common import chunk_ranges, segment_bounds
from sw.collectives.algorithms.rhd import halving_plan
from sw.collectives.algorithms.tree import heap_links
from sw.collectives.bootstrap import default_model
from sw.collectives.config import CommConfig
from sw.collectives.dtypes import bf16_to_f32, f32_to_bf16, reducer
from sw.collectives.transport.base import Request, byte_view
from sw.collectives.transport.shm import Ring, ShmChannel
from sw.collectives.transport.throttle import Throttle
from sw.collectives.tuner import CostModel, LinkCost, Tuner, parse_algo_env

pytestmark = pytest.mark.unit


def test_bf16_rounds_to_nearest_even_and_keeps_specials() -> None:
    values = np.array([1.0, 1 + 2**-8, 1 + 3 * 2**-8, -2.5, np.inf, np.nan], dtype=np.float32)
    bits = f32_to_bf16(values)
    assert bits[:5].tolist() == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80]
    assert np.isnan(bf16_to_f32(bits[5:]))[0]
    every = np.arange(0, 0x7F80, 7, dtype=np.uint16)  # finite positive bf16 values round-trip exactly
    assert np.array_equal(f32_to_bf16(bf16_to_f32(every)), every)


def test_bf16_rounding_matches_nearest_even_on_random_floats() -> None:
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 0x7F7F0000, 20_000, dtype=np.uint32)  # finite positive floats below bf16 max
    values = bits.view(np.float32)
    lo = (bits & 0xFFFF0000).view(np.float32).astype(np.float64)
    hi = ((bits & 0xFFFF0000) + 0x10000).view(np.float32).astype(np.float64)
    down, up = values - lo, hi - values
    lo_bits = (bits >> 16).astype(np.uint16)
    want = np.where(down < up, lo_bits, np.where(up < down, lo_bits + 1, lo_bits + (lo_bits & 1)))
    assert np.array_equal(f32_to_bf16(values), want.astype(np.uint16))
    assert np.array_equal(f32_to_bf16(-values), want.astype(np.uint16) | 0x8000)


def test_bf16_reduction_rounds_every_step() -> None:
    dst = f32_to_bf16(np.array([1.0, 3.0], np.float32))
    reducer("sum", "bfloat16")(dst, f32_to_bf16(np.array([2**-8, 4.0], np.float32)))
    assert bf16_to_f32(dst).tolist() == [1.0, 7.0]  # 1 + 2^-8 is a tie: rounds to even (1.0)
    reducer("max", "bfloat16")(dst, f32_to_bf16(np.array([-5.0, 8.0], np.float32)))
    assert bf16_to_f32(dst).tolist() == [1.0, 8.0]


def test_segments_and_chunks_cover_the_buffer_once() -> None:
    assert segment_bounds(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert segment_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert chunk_ranges(3, 10, 4) == [(3, 7), (7, 10)]
    assert chunk_ranges(5, 5, 4) == []


@pytest.mark.parametrize("pof2", [2, 4, 8, 16])
def test_recursive_halving_partners_agree_and_each_rank_ends_on_its_block(pof2: int) -> None:
    plans = [halving_plan(q, pof2) for q in range(pof2)]
    for q, plan in enumerate(plans):
        assert plan[-1][1] == (q, q + 1)
        for step, (partner, keep, send) in enumerate(plan):
            assert plans[partner][step][0] == q
            assert plans[partner][step][1] == send and plans[partner][step][2] == keep


@pytest.mark.parametrize("n", [2, 3, 5, 6, 8])
def test_double_binary_tree_inner_nodes_are_leaves_of_the_other_tree(n: int) -> None:
    inner_plain = {p for p in range(n) if heap_links(p, n)[1]}
    inner_mirror = {p for p in range(n) if heap_links(n - 1 - p, n)[1]}
    assert not inner_plain & inner_mirror
    assert sum(len(heap_links(q, n)[1]) for q in range(n)) == n - 1  # a tree: n-1 edges


def test_layout_link_classes_and_validation() -> None:
    layout = RankLayout.grid(2, 2)
    assert [layout.link_class(0, r) for r in (1, 2, 3)] == ["intra", "rail", "cross"]
    assert layout.rail_ranks(1) == [1, 3] and layout.local_ranks(1) == [2, 3]
    with pytest.raises(CollectiveUserError, match="already has a rank with LOCAL_RANK 0"):
        RankLayout((0, 0), (0, 0))
    with pytest.raises(CollectiveUserError, match=r"LOCAL_RANK values \[0, 2\]"):
        RankLayout((0, 0), (0, 2))


def test_tuner_model_prefers_hierarchical_allreduce_and_rail_aligned_alltoall() -> None:
    model = default_model(CommConfig())
    tuner = Tuner(RankLayout.grid(4, 2), model, env={})
    assert tuner.algo("allreduce", 64 << 20) == "hier"
    assert tuner.algo("alltoall", 64 << 10) == "rail"  # same NIC bytes and messages as pairwise: spine-free wins
    assert tuner.algo("alltoall", 64 << 20) == "rail"  # equal rail and spine bandwidth: a tie at the NIC bound
    spine = LinkCost(model.inter.alpha_s, model.inter.rate_bps / 2)  # a 2:1 oversubscribed spine
    assert Tuner(RankLayout.grid(4, 2), CostModel(model.intra, model.inter, spine), env={}).algo(
        "alltoall", 64 << 20) == "rail"
    small = tuner.algo("allreduce", 8)
    assert tuner.estimate_s("allreduce", small, 8) <= tuner.estimate_s("allreduce", "ring", 8)
    assert 4096 <= tuner.chunk_bytes("allreduce", "ring", 64 << 20) <= 4 << 20
    assert "rhd" not in Tuner(RankLayout.grid(3, 1), default_model(CommConfig()), env={}).available("allgather")


def test_tuner_overrides_by_call_and_environment() -> None:
    env = {"STARPULSE_ALGO": "allreduce=tree, alltoall=pairwise", "STARPULSE_CHUNK_BYTES": "64K"}
    tuner = Tuner(RankLayout.grid(2, 2), default_model(CommConfig()), env=env)
    assert tuner.algo("allreduce", 1 << 30) == "tree"
    assert tuner.algo("alltoall", 1 << 30) == "pairwise"
    assert tuner.algo("allreduce", 1 << 30, requested="rhd") == "rhd"
    assert tuner.chunk_bytes("allreduce", "ring", 1 << 20) == 65536
    assert tuner.chunk_bytes("allreduce", "ring", 1 << 20, requested=1000) == 1000
    assert parse_algo_env("ring") == {c: "ring" for c in ("allreduce", "broadcast", "reduce", "allgather",
                                                          "reducescatter")}


@pytest.mark.parametrize("env,match", [
    ({"STARPULSE_ALGO": "ringg"}, r"\$STARPULSE_ALGO='ringg': unknown algorithm 'ringg'"),
    ({"STARPULSE_ALGO": "alltoall=hier"}, r"unknown algorithm 'hier' \(allowed: pairwise, rail\)"),
    ({"STARPULSE_ALGO": "allsum=ring"}, r"unknown collective 'allsum'"),
    ({"STARPULSE_CHUNK_BYTES": "lots"}, r"\$STARPULSE_CHUNK_BYTES 'lots': expected a size"),
])
def test_bad_tuner_environment_is_a_user_error(env: dict[str, str], match: str) -> None:
    with pytest.raises(CollectiveUserError, match=match) as info:
        Tuner(RankLayout.grid(1, 2), default_model(CommConfig()), env=env)
    assert info.value.is_user_error


def test_bad_per_call_choices_are_user_errors() -> None:
    tuner = Tuner(RankLayout.grid(1, 2), default_model(CommConfig()), env={})
    with pytest.raises(CollectiveUserError, match=r"algo 'rail': unknown for allreduce"):
        tuner.algo("allreduce", 8, requested="rail")
    with pytest.raises(CollectiveUserError, match="chunk_bytes 0"):
        tuner.chunk_bytes("allreduce", "ring", 8, requested=0)


@pytest.mark.parametrize("env,match", [
    ({"STARPULSE_TIMEOUT": "-3"}, r"\$STARPULSE_TIMEOUT='-3'"),
    ({"STARPULSE_INTRA_RATE": "fast"}, r"\$STARPULSE_INTRA_RATE 'fast': expected a rate"),
    ({"STARPULSE_SHM_BYTES": "1K"}, r"at least 4K"),
    ({"STARPULSE_CALIBRATE": "maybe"}, r"expected 0 or 1"),
])
def test_bad_config_environment_is_a_user_error(env: dict[str, str], match: str) -> None:
    with pytest.raises(CollectiveUserError, match=match):
        CommConfig.from_env(env)


def test_config_environment_is_read() -> None:
    cfg = CommConfig.from_env({"STARPULSE_INTRA_RATE": "off", "STARPULSE_INTER_RATE": "100M",
                               "STARPULSE_SHM_BYTES": "64K", "STARPULSE_TIMEOUT": "2.5"})
    assert (cfg.intra_rate_bps, cfg.inter_rate_bps, cfg.shm_ring_bytes, cfg.timeout_s) == (None, 1e8, 65536, 2.5)


def test_collective_store_raises_the_collectives_errors(tmp_path: Path) -> None:
    """A rank that never shows up is a CollectiveTimeoutError, an unusable path a CollectiveUserError."""
    store = CollectiveStore(tmp_path / "s", timeout_s=0.2)
    with pytest.raises(CollectiveTimeoutError, match="waiting for key 'missing'"):
        store.wait("missing")
    (tmp_path / "file").write_text("x")
    with pytest.raises(CollectiveUserError, match="store path .*cannot create directory"):
        CollectiveStore(tmp_path / "file" / "sub")


@pytest.fixture
def ring_pair():
    """Two channels (ranks 0 and 1) joined by two small shared-memory rings; files removed at once."""
    job = f"t{os.getpid()}{uuid.uuid4().hex[:6]}"
    from sw.collectives.transport.shm import ring_path
    a2b = Ring(ring_path(job, 0, 1), 4096, create=True)
    b2a = Ring(ring_path(job, 1, 0), 4096, create=True)
    a2b.path.unlink()
    b2a.path.unlink()
    a, b = ShmChannel(0, 1, a2b, b2a, None), ShmChannel(1, 0, b2a, a2b, None)
    try:
        yield a, b
    finally:
        a2b.close(as_writer=True)
        b2a.close(as_writer=False)


def _pump(*chans: ShmChannel, reqs: list[Request]) -> None:
    for _ in range(10_000):
        for ch in chans:
            ch.progress()
        if all(r.done for r in reqs):
            return
    raise AssertionError(f"requests did not complete: {reqs}")


def test_stream_wraps_the_ring_and_buffers_early_messages(ring_pair) -> None:
    a, b = ring_pair
    data = [np.arange(k * 1000, (k + 1) * 1000 + k, dtype=np.int64) for k in range(3)]  # > ring size each
    sends = [Request("send", 1, 7, byte_view(d)) for d in data]
    for s in sends:
        a.post_send(s)
    _pump(a, b, reqs=sends)  # all sent before any receive is posted: b keeps them
    outs = [np.zeros_like(d) for d in data]
    recvs = [Request("recv", 0, 7, byte_view(o)) for o in outs]
    for r in recvs:
        b.post_recv(r)
    _pump(a, b, reqs=recvs)
    assert all(np.array_equal(o, d) for o, d in zip(outs, data, strict=True))


def test_stream_reports_mismatched_sizes_and_tags(ring_pair) -> None:
    a, b = ring_pair
    a.post_send(Request("send", 1, 0x5, byte_view(np.zeros(10, np.float32))))
    b.post_recv(Request("recv", 0, 0x5, byte_view(np.zeros(20, np.float32))))
    with pytest.raises(CollectiveMismatchError, match="40 bytes where it expected tag 0x5 and 80 bytes") as info:
        _pump(a, b, reqs=[])
    assert info.value.is_user_error


def test_throttle_grants_rate_times_time_and_burst() -> None:
    clock = ManualClock()
    throttle = Throttle(8e9, burst_bytes=100, clock=clock)  # 1 byte per ns
    assert throttle.grant(1000) == 100
    assert throttle.grant(10) == 0
    clock.advance_ns(40)
    assert throttle.grant(1000) == 40
    clock.advance_ns(10_000)
    assert throttle.grant(1000) == 100


def test_throttle_banks_its_burst_only_while_sends_wait() -> None:
    clock = ManualClock()
    throttle = Throttle(8e9, burst_bytes=1000, clock=clock, idle_burst_bytes=100)  # 1 byte per ns
    assert throttle.grant(5000) == 100           # a fresh (idle) link starts with the idle burst only
    clock.advance_ns(10_000)
    assert throttle.grant(5000) == 100           # idle for 10 us: still no more than the idle burst
    throttle.backlogged = True                   # the transport saw queued sends: a late sender may catch up
    clock.advance_ns(10_000)
    assert throttle.grant(5000) == 1000
    clock.advance_ns(500)
    assert throttle.grant(5000) == 500           # backlogged or not, the long-run rate is the configured one
