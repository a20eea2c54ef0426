"""Hierarchical rail-aware allreduce: intra-server reduce-scatter, per-rail inter-server allreduce of the
owned segment, intra-server allgather.  Only same-rail traffic leaves a server, so no byte crosses a spine."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CollectiveUserError
from ..router import Net
from .common import Reduce, segment_bounds
from .ring import ring


def hier_owned_segment(local_pos: Any, g: int) -> Any:
    """The segment (of ``g``) GPU ``local_pos`` owns after the intra-server reduce-scatter (ring, ``off=0``) and
    allreduces over its rail; an int or a numpy array of positions."""
    return (local_pos + 1) % g


def hier_allreduce(net: Net, x: np.ndarray, reduce: Reduce, chunk_elems: int) -> None:
    layout = net.layout
    if not layout.uniform:
        raise CollectiveUserError("algorithm 'hier' needs the same number of GPUs on every server (use 'ring')")
    local = layout.local_ranks(layout.server_of[net.rank])
    rail = layout.rail_ranks(layout.local_of[net.rank])
    g = len(local)
    bounds = segment_bounds(len(x), g)
    ring(net, local, x, chunk_elems, reduce, rs=True, ag=False, off=0, bounds=bounds)
    lo, hi = bounds[hier_owned_segment(local.index(net.rank), g)]
    ring(net, rail, x[lo:hi], chunk_elems, reduce, rs=True, ag=True)
    ring(net, local, x, chunk_elems, None, rs=False, ag=True, off=0, bounds=bounds)
