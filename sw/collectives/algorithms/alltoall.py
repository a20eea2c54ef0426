"""All-to-all schedules: flat pairwise exchange, and rail-aligned (first move each block inside the server to
the GPU on the destination's rail, then one hop over that rail: no byte crosses a spine).

Both put the same bytes on every NIC ((S-1)*G blocks out and in, S servers of G GPUs): rail-aligned does not
shorten the NIC's work, it keeps that work off the spines (no ECMP collisions, no oversubscribed uplinks, one
switch hop instead of three) and overlaps its shared-memory shuffle with the rail transfers.
"""

from __future__ import annotations

import numpy as np

from ..errors import CollectiveUserError
from ..net import Net


def pairwise_alltoall(net: Net, send: np.ndarray, recv: np.ndarray) -> None:
    """Step s exchanges with p+s and p-s; every block is posted at once (eager buffering, no deadlock)."""
    n = net.layout.world_size
    p = net.rank
    blocks_s, blocks_r = send.reshape(n, len(send) // n), recv.reshape(n, len(recv) // n)
    reqs = []
    for s in range(1, n):
        reqs.append(net.irecv((p - s) % n, blocks_r[(p - s) % n]))
        reqs.append(net.isend((p + s) % n, blocks_s[(p + s) % n]))
    blocks_r[p] = blocks_s[p]
    net.waitall(reqs)


def rail_alltoall(net: Net, send: np.ndarray, recv: np.ndarray, trace: dict[str, int] | None = None) -> None:
    """Rail-aligned, pipelined per block: this rank's own blocks leave over its rail at once; each local
    GPU's block for my rail of server ``i`` comes over shared memory as its own message (in the order they are
    forwarded) and goes on over the rail as soon as it has landed.

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
    remote = [(mine + k) % nserv for k in range(1, nserv)]  # server indexes in my forwarding order
    others = [g for g in range(ngpu) if g != my_gpu]
    # inbox[i, g]: the block from GPU g of server i for me; posted first so nothing waits in eager buffers
    inbox = np.empty((nserv, ngpu, width), dtype=send.dtype)
    reqs = []
    for i in remote:
        reqs += [net.irecv(rails[my_gpu][i], inbox[i, g]) for g in [my_gpu, *others]]
    # my own blocks for my rail leave now (one rail hop each)
    reqs += [net.isend(rails[my_gpu][i], blocks_s[rails[my_gpu][i]]) for i in remote]
    # stage[g, i]: local GPU g's block for my rail's GPU of server i (it arrives over shared memory)
    stage = np.empty((ngpu, nserv, width), dtype=send.dtype)
    staged = {g: [net.irecv(local[g], stage[g, i]) for i in remote] for g in others}
    for g in others:  # my blocks for local GPU g's rail, in its forwarding order (same server, same rotation)
        reqs += [net.isend(local[g], blocks_s[rails[g][i]]) for i in remote]
        reqs += [net.irecv(local[g], inbox[mine, g])]
        reqs += [net.isend(local[g], blocks_s[local[g]])]
    for k, i in enumerate(remote):  # forward each relayed block once it landed, server by server
        for g in others:
            net.wait(staged[g][k])
            reqs.append(net.isend(rails[my_gpu][i], stage[g, i]))
    if trace is not None:
        trace["staged_ns"] = net.clock.now_ns() - t0
    inbox[mine, my_gpu] = blocks_s[me]
    net.waitall(reqs)
    for i, s in enumerate(servers):
        blocks_r[layout.local_ranks(s)] = inbox[i]
    if trace is not None:
        trace["end_ns"] = net.clock.now_ns() - t0
