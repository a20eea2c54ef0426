"""All-to-all schedules: flat pairwise exchange, and rail-aligned (first move each block inside the server to
the GPU on the destination's rail, then one hop over that rail: no byte crosses a spine)."""

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


def rail_alltoall(net: Net, send: np.ndarray, recv: np.ndarray) -> None:
    """Two overlapped phases: blocks go inside the server to the GPU on the destination's rail, and each one
    is forwarded over that rail as soon as it has arrived (this rank's own blocks leave at once)."""
    layout = net.layout
    if not layout.uniform:
        raise CollectiveUserError("algorithm 'rail' needs the same number of GPUs on every server (use 'pairwise')")
    n, me = layout.world_size, net.rank
    width = len(send) // n
    blocks_s, blocks_r = send.reshape(n, width), recv.reshape(n, width)
    servers = layout.servers
    my_server, my_gpu = layout.server_of[me], layout.local_of[me]
    local = layout.local_ranks(my_server)
    rails = {g: layout.rail_ranks(g) for g in range(len(local))}  # rank of GPU g on each server, by server
    mine = servers.index(my_server)
    order = [my_gpu] + [g for g in range(len(local)) if g != my_gpu]  # the same on both ends of a rail
    # stage[g, i]: the block from local GPU g for the GPU on my rail of server i
    stage = np.empty((len(local), len(servers), width), dtype=send.dtype)
    inbox = np.empty((len(servers), len(local), width), dtype=send.dtype)  # [source server, source gpu]
    reqs, phase1 = [], {}
    for i, s in enumerate(servers):  # every block from my rail's GPU of server s, posted up front
        if s != my_server:
            reqs += [net.irecv(rails[my_gpu][i], inbox[i, g]) for g in order]
    outgoing = {}
    for g in order[1:]:
        peer = local[g]
        outgoing[g] = np.ascontiguousarray(blocks_s[rails[g]])
        phase1[g] = net.irecv(peer, stage[g])
        reqs.append(net.isend(peer, outgoing[g]))
    stage[my_gpu] = blocks_s[rails[my_gpu]]
    for g in order:
        if g != my_gpu:
            net.wait(phase1[g])
        for i, s in enumerate(servers):
            if s != my_server:
                reqs.append(net.isend(rails[my_gpu][i], stage[g, i]))
    inbox[mine] = stage[:, mine]
    net.waitall(reqs)
    for i, s in enumerate(servers):
        blocks_r[layout.local_ranks(s)] = inbox[i]
