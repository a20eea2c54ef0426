"""All-to-all schedules: flat pairwise exchange, and rail-aligned (first move each block inside the server to
the GPU on the destination's rail, then one hop over that rail: no byte crosses a spine).

Both put the same bytes on every NIC ((S-1)*G blocks out and in, S servers of G GPUs): rail-aligned does not
shorten the NIC's work, it keeps that work off the spines (no ECMP collisions, no oversubscribed uplinks, one
switch hop instead of three) and overlaps its shared-memory shuffle with the rail transfers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CollectiveUserError
from ..router import Net
from .common import chunk_ranges


def _pieces(width: int, chunk: int | None) -> list[tuple[int, int]]:
    """A block of ``width`` elements as its pipeline chunks (one piece when ``chunk`` is None)."""
    return chunk_ranges(0, width, chunk or width) or [(0, 0)]


def pairwise_peers(p: Any, n: int) -> list[tuple[Any, Any]]:
    """Pairwise all-to-all's schedule for position ``p`` of ``n`` (an int or a numpy array): (send to, receive
    from) per step s = 1..n-1, one block each way."""
    return [((p + s) % n, (p - s) % n) for s in range(1, n)]


def rail_order(mine: int, nserv: int) -> list[int]:
    """Rail-aligned all-to-all's forwarding order of server ``mine`` of ``nserv``: mine+1, mine+2, ..."""
    return [(mine + k) % nserv for k in range(1, nserv)]


def pairwise_alltoall(net: Net, send: np.ndarray, recv: np.ndarray, chunk: int | None = None) -> None:
    """Step s exchanges with p+s and p-s; every block is posted at once (eager buffering, no deadlock), as
    messages of at most ``chunk`` elements, chunk k of every step before chunk k+1 of any."""
    n = net.layout.world_size
    p = net.rank
    width = len(send) // n
    blocks_s, blocks_r = send.reshape(n, width), recv.reshape(n, width)
    reqs = []
    for lo, hi in _pieces(width, chunk):
        for to, frm in pairwise_peers(p, n):
            reqs.append(net.irecv(frm, blocks_r[frm, lo:hi]))
            reqs.append(net.isend(to, blocks_s[to, lo:hi]))
    blocks_r[p] = blocks_s[p]
    net.waitall(reqs)


def rail_alltoall(net: Net, send: np.ndarray, recv: np.ndarray, trace: dict[str, int] | None = None,
                  chunk: int | None = None) -> None:
    """Rail-aligned, pipelined per chunk (of at most ``chunk`` elements; a whole block when None): this rank's
    own blocks leave over its rail at once; each local GPU's block for my rail of server ``i`` comes over shared
    memory chunk by chunk (in the order they are forwarded) and each chunk goes on over the rail as soon as it
    has landed.

    Server i of S is visited in the rotated order mine+1, mine+2, ... so the servers of a rail start on
    different receivers.  ``trace`` (optional) gets the network ns from the start until the whole intra-server
    shuffle had landed (``staged_ns``) and until the end (``end_ns``)."""
    layout = net.layout
    if not layout.uniform:
        raise CollectiveUserError("algorithm 'rail' needs the same number of GPUs on every server (use 'pairwise')")
    t0 = net.clock.now_ns() if trace is not None else 0
    n, me = layout.world_size, net.rank
    width = len(send) // n
    blocks_s, blocks_r = send.reshape(n, width), recv.reshape(n, width)
    servers = layout.servers
    nserv = len(servers)
    my_server, my_gpu = layout.server_of[me], layout.local_of[me]
    local = layout.local_ranks(my_server)
    ngpu = len(local)
    rails = [layout.rail_ranks(g) for g in range(ngpu)]  # rails[g][i]: rank of GPU g on server index i
    mine = servers.index(my_server)
    remote = rail_order(mine, nserv)  # server indexes in my forwarding order
    others = [g for g in range(ngpu) if g != my_gpu]
    pieces = _pieces(width, chunk)
    # inbox[i, g]: the block from GPU g of server i for me; posted first so nothing waits in eager buffers
    inbox = np.empty((nserv, ngpu, width), dtype=send.dtype)
    reqs = []
    for i in remote:
        reqs += [net.irecv(rails[my_gpu][i], inbox[i, g, lo:hi]) for g in [my_gpu, *others] for lo, hi in pieces]
    # my own blocks for my rail leave now (one rail hop each)
    reqs += [net.isend(rails[my_gpu][i], blocks_s[rails[my_gpu][i], lo:hi]) for i in remote for lo, hi in pieces]
    # stage[g, i]: local GPU g's block for my rail's GPU of server i (it arrives over shared memory)
    stage = np.empty((ngpu, nserv, width), dtype=send.dtype)
    staged = {g: [[net.irecv(local[g], stage[g, i, lo:hi]) for lo, hi in pieces] for i in remote] for g in others}
    for g in others:  # my blocks for local GPU g's rail, in its forwarding order (same server, same rotation)
        reqs += [net.isend(local[g], blocks_s[rails[g][i], lo:hi]) for i in remote for lo, hi in pieces]
        reqs += [net.irecv(local[g], inbox[mine, g])]
        reqs += [net.isend(local[g], blocks_s[local[g]])]
    for k, i in enumerate(remote):  # forward each relayed chunk once it landed, server by server
        for g in others:
            for (lo, hi), landed in zip(pieces, staged[g][k], strict=True):
                net.wait(landed)
                reqs.append(net.isend(rails[my_gpu][i], stage[g, i, lo:hi]))
    if trace is not None:
        trace["staged_ns"] = net.clock.now_ns() - t0
    inbox[mine, my_gpu] = blocks_s[me]
    net.waitall(reqs)
    for i, s in enumerate(servers):
        blocks_r[layout.local_ranks(s)] = inbox[i]
    if trace is not None:
        trace["end_ns"] = net.clock.now_ns() - t0
