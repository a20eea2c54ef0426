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
    """Two phases: intra-server to the destination's rail GPU, then one inter-server hop on that rail."""
    layout = net.layout
    if not layout.uniform:
        raise CollectiveUserError("algorithm 'rail' needs the same number of GPUs on every server (use 'pairwise')")
    n, me = layout.world_size, net.rank
    blocks_s, blocks_r = send.reshape(n, len(send) // n), recv.reshape(n, len(recv) // n)
    servers = layout.servers
    my_server, my_gpu = layout.server_of[me], layout.local_of[me]
    local = layout.local_ranks(my_server)
    rail_of = {s: layout.rail_ranks(my_gpu)[i] for i, s in enumerate(servers)}  # my rail's rank on server s
    # phase 1: to local GPU g' the blocks for (every server, g'); from local GPU g the blocks (source g -> my rail)
    stage = np.empty((len(local), len(servers), blocks_s.shape[1]), dtype=send.dtype)  # [src gpu, dst server]
    out, reqs = {}, []
    for peer in local:
        g = layout.local_of[peer]
        dests = [layout.rail_ranks(g)[i] for i in range(len(servers))]
        if peer == me:
            stage[g] = blocks_s[dests]
            continue
        out[peer] = np.ascontiguousarray(blocks_s[dests])
        reqs.append(net.irecv(peer, stage[g]))
        reqs.append(net.isend(peer, out[peer]))
    net.waitall(reqs)
    # phase 2: to my rail's GPU on server s: what every local GPU has for it; from it: what its server has for me
    src_ranks = {s: layout.local_ranks(s) for s in servers}
    inbox = np.empty((len(servers), len(local), blocks_s.shape[1]), dtype=send.dtype)  # [src server, src gpu]
    reqs, out2 = [], {}
    for i, s in enumerate(servers):
        if s == my_server:
            inbox[i] = stage[:, i]
            continue
        out2[s] = np.ascontiguousarray(stage[:, i])
        reqs.append(net.irecv(rail_of[s], inbox[i]))
        reqs.append(net.isend(rail_of[s], out2[s]))
    net.waitall(reqs)
    for i, s in enumerate(servers):
        blocks_r[src_ranks[s]] = inbox[i]
