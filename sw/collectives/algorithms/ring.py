"""Ring schedules: reduce-scatter and/or allgather around a ring of ranks, pipelined in chunks.

With ``off = 0`` a reduce-scatter leaves position p owning segment p+1 (what allreduce wants: the allgather
that follows starts from it); ``off = -1`` makes position p own segment p (reducescatter/allgather layout).
Each chunk moves on to the next step as soon as it has been received and reduced, so steps overlap.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..router import Net
from ..transport.base import Request
from .common import Reduce, chunk_ranges, segment_bounds


def ring_step(p: Any, n: int, k: int, reducing: bool, off: int = 0) -> tuple[bool, Any, Any]:
    """Step k (0..n-2) of the ring's reduce-scatter (``reducing``) or allgather phase for position ``p`` of
    ``n``: (reducing, send segment, recv segment); position p sends to p+1.  ``p`` may be a numpy array of
    positions (the flow-level simulator asks for all at once)."""
    if reducing:
        return (True, (p - k + off) % n, (p - k - 1 + off) % n)
    return (False, (p + 1 + off - k) % n, (p + off - k) % n)


def ring_steps(p: Any, n: int, rs: bool, ag: bool, off: int = 0) -> list[tuple[bool, Any, Any]]:
    """The ring's whole schedule for position ``p``: n-1 reduce-scatter steps (``rs``), then n-1 allgather
    steps (``ag``)."""
    return ([ring_step(p, n, k, True, off) for k in range(n - 1)] if rs else []) + \
        ([ring_step(p, n, k, False, off) for k in range(n - 1)] if ag else [])


def ring(net: Net, group: list[int], x: np.ndarray, chunk_elems: int, reduce: Reduce | None,
         rs: bool, ag: bool, off: int = 0, bounds: list[tuple[int, int]] | None = None) -> None:
    """Run the reduce-scatter (``rs``) and/or allgather (``ag``) phases of a ring over ``group`` on ``x``."""
    n = len(group)
    if n == 1:
        return
    p = group.index(net.rank)
    right, left = group[(p + 1) % n], group[(p - 1) % n]
    bounds = bounds or segment_bounds(len(x), n)
    steps = ring_steps(p, n, rs, ag, off)
    scratch = np.empty(max(hi - lo for lo, hi in bounds), dtype=x.dtype) if rs else x
    sends: list[Request] = [net.isend(right, x[a:b]) for a, b in chunk_ranges(*bounds[steps[0][1]], chunk_elems)]
    for k, (reducing, _, recv_seg) in enumerate(steps):
        if not reducing and k > 0 and steps[k - 1][0]:
            net.waitall(sends)  # allgather overwrites segments that reduce-scatter sends may still read
            sends = []
        lo_seg = bounds[recv_seg][0]
        chunks = chunk_ranges(*bounds[recv_seg], chunk_elems)
        if reducing:
            recvs = [net.irecv(left, scratch[a - lo_seg:b - lo_seg]) for a, b in chunks]
        else:
            recvs = [net.irecv(left, x[a:b]) for a, b in chunks]
        for (a, b), req in zip(chunks, recvs, strict=True):
            net.wait(req)
            if reducing:
                assert reduce is not None
                reduce(x[a:b], scratch[a - lo_seg:b - lo_seg])
            if k + 1 < len(steps):
                sends.append(net.isend(right, x[a:b]))
        sends = [r for r in sends if not r.done]
    net.waitall(sends)


def ring_allreduce(net: Net, group: list[int], x: np.ndarray, reduce: Reduce, chunk_elems: int) -> None:
    ring(net, group, x, chunk_elems, reduce, rs=True, ag=True)


def ring_broadcast(net: Net, group: list[int], x: np.ndarray, root: int, chunk_elems: int) -> None:
    """A pipelined chain root -> root+1 -> ...: each chunk is forwarded as soon as it lands."""
    n = len(group)
    if n == 1:
        return
    q = (group.index(net.rank) - group.index(root)) % n
    nxt = group[(group.index(root) + q + 1) % n] if q < n - 1 else None
    prev = group[(group.index(root) + q - 1) % n] if q > 0 else None
    chunks = chunk_ranges(0, len(x), chunk_elems)
    recvs = [net.irecv(prev, x[a:b]) for a, b in chunks] if prev is not None else [None] * len(chunks)
    sends = []
    for (a, b), req in zip(chunks, recvs, strict=True):
        if req is not None:
            net.wait(req)
        if nxt is not None:
            sends.append(net.isend(nxt, x[a:b]))
    net.waitall(sends)


def ring_reduce(net: Net, group: list[int], x: np.ndarray, root: int, reduce: Reduce, chunk_elems: int) -> None:
    """A pipelined chain ending at ``root``: root+n-1 -> ... -> root+1 -> root, reducing chunk by chunk."""
    n = len(group)
    if n == 1:
        return
    r0 = group.index(root)
    q = (group.index(net.rank) - r0) % n
    towards_root = group[(r0 + q - 1) % n] if q > 0 else None
    from_far = group[(r0 + q + 1) % n] if q < n - 1 else None
    chunks = chunk_ranges(0, len(x), chunk_elems)
    scratch = np.empty_like(x) if from_far is not None else x
    recvs = [net.irecv(from_far, scratch[a:b]) for a, b in chunks] if from_far is not None else [None] * len(chunks)
    sends = []
    for (a, b), req in zip(chunks, recvs, strict=True):
        if req is not None:
            net.wait(req)
            reduce(x[a:b], scratch[a:b])
        if towards_root is not None:
            sends.append(net.isend(towards_root, x[a:b]))
    net.waitall(sends)
