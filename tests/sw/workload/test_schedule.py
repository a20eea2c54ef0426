"""The DDP bucket schedule (which bucket starts after which layer) and the exposed-communication accounting."""

from __future__ import annotations

import pytest

from sw.workload import account_step, plan_buckets
from sw.workload.schedule import COMM, COMPUTE, WAIT

pytestmark = pytest.mark.unit


def test_buckets_fill_in_backward_order_and_start_when_their_last_layer_is_done() -> None:
    buckets = plan_buckets([10, 10, 10, 10, 10], cap_bytes=25)
    assert [b.layers for b in buckets] == [(4, 3, 2), (1, 0)]
    assert [b.ready_after for b in buckets] == [2, 0]
    assert [b.nbytes for b in buckets] == [30, 20]


def test_a_big_layer_is_its_own_bucket_and_empty_layers_join_none() -> None:
    buckets = plan_buckets([5, 0, 100, 5], cap_bytes=50)
    assert [(b.layers, b.nbytes) for b in buckets] == [((3, 2), 105), ((0,), 5)]
    with pytest.raises(ValueError):
        plan_buckets([1], cap_bytes=0)


def test_exposed_comm_is_comm_in_flight_while_not_computing() -> None:
    # compute 0-40 (backward), allreduce in flight 30-70 (10 overlapped), waiting 40-70, optimizer 70-80
    st = account_step(0, 80, [(COMPUTE, 0, 40), (COMM, 30, 70), (WAIT, 40, 70), (COMPUTE, 70, 80)])
    assert (st.step_ns, st.compute_ns, st.comm_busy_ns, st.exposed_comm_ns) == (80, 50, 40, 30)
    assert st.comm_share == 30 / 80


def test_overlapping_comm_counts_once_and_segments_clip_to_the_step() -> None:
    st = account_step(10, 100, [(COMM, 0, 30), (COMM, 20, 50), (COMPUTE, 40, 60), (COMM, 90, 120)])
    assert (st.comm_busy_ns, st.exposed_comm_ns, st.compute_ns) == (50, 40, 20)


def test_waiting_for_a_collective_to_start_is_exposed_too() -> None:
    # the rank blocks at 10; the stream starts the all-to-all only at 14 (hand-off) and it ends at 30
    st = account_step(0, 40, [(COMPUTE, 0, 10), (WAIT, 10, 30), (COMM, 14, 30), (COMPUTE, 30, 40)])
    assert (st.comm_busy_ns, st.exposed_comm_ns) == (16, 20)
