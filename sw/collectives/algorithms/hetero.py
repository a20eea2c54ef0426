"""Heterogeneous parallel allreduce (TCCL's NVLink+NET): the buffer is split in two parts run at the same time,
one through the hierarchical path (intra-server reduce-scatter over shared memory, per-rail allreduce, intra
allgather) and one through the rail-first path (per-rail reduce-scatter over the network, intra-server allreduce
of the owned segment, per-rail allgather), so shared memory and the NICs are busy together; the tuner picks the
split so both parts finish together."""

from __future__ import annotations

import threading

import numpy as np

from ..errors import CollectiveUserError
from ..router import Net
from .common import Reduce, segment_bounds
from .hier import hier_allreduce, hier_owned_segment
from .ring import ring


def rail_first_allreduce(net: Net, x: np.ndarray, reduce: Reduce, chunk_elems: int) -> None:
    """Rail ring reduce-scatter (server position p then owns segment ``hier_owned_segment(p, S)``), intra-server
    ring allreduce of that segment (every GPU of a server owns the same one), rail ring allgather."""
    layout = net.layout
    local = layout.local_ranks(layout.server_of[net.rank])
    rail = layout.rail_ranks(layout.local_of[net.rank])
    bounds = segment_bounds(len(x), len(rail))
    ring(net, rail, x, chunk_elems, reduce, rs=True, ag=False, off=0, bounds=bounds)
    lo, hi = bounds[hier_owned_segment(rail.index(net.rank), len(rail))]
    ring(net, local, x[lo:hi], chunk_elems, reduce, rs=True, ag=True)
    ring(net, rail, x, chunk_elems, None, rs=False, ag=True, off=0, bounds=bounds)


def hetero_allreduce(net: Net, x: np.ndarray, reduce: Reduce, chunk_elems: int, hier_elems: int) -> None:
    """``x[:hier_elems]`` through ``hier_allreduce`` on this thread while ``x[hier_elems:]`` goes through
    ``rail_first_allreduce`` on a helper thread, in the second message lane; the first error of either is raised."""
    if not net.layout.uniform:
        raise CollectiveUserError("algorithm 'hetero' needs the same number of GPUs on every server (use 'ring')")
    if not 0 <= hier_elems <= len(x):
        raise CollectiveUserError(f"hetero split {hier_elems}: expected 0..{len(x)} elements")
    rest = x[hier_elems:]
    errors: list[BaseException] = []
    helper: threading.Thread | None = None
    if len(rest):
        lane = net.second_lane()

        def run_rest() -> None:
            try:
                rail_first_allreduce(lane, rest, reduce, chunk_elems)
            except BaseException as exc:  # raised by the caller's thread below
                errors.append(exc)
        helper = threading.Thread(target=run_rest, name=f"hetero-rank{net.rank}", daemon=True)
        helper.start()
    try:
        if hier_elems:
            hier_allreduce(net, x[:hier_elems], reduce, chunk_elems)
    finally:
        if helper is not None:
            helper.join()
    if errors:
        raise errors[0]

