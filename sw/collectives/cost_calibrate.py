"""Short calibration of the cost model: ping-pong on one intra-server, one same-rail and one cross-rail pair,
measured on ``sw.clock`` by rank 0 and broadcast so that every rank's tuner decides the same way."""

from __future__ import annotations

import numpy as np

from .algorithms.ring import ring_broadcast
from .comm import Communicator
from .tuner import CostModel, LinkCost

SMALL_BYTES = 8
LARGE_BYTES = 1 << 20
REPS = 5


def _pingpong(comm: Communicator, a: int, b: int) -> tuple[float, float]:
    """(alpha_s, rate_bps) between ranks a and b, measured on a; (0, 0) on b and bystanders."""
    net, clock = comm.net, comm.net.clock
    small, large, ack = np.zeros(SMALL_BYTES, np.uint8), np.zeros(LARGE_BYTES, np.uint8), np.zeros(1, np.uint8)
    if comm.rank == b:
        for _ in range(REPS):
            net.wait(net.irecv(a, small))
            net.waitall([net.isend(a, small)])
        for _ in range(REPS):
            net.wait(net.irecv(a, large))
            net.waitall([net.isend(a, ack)])
        return 0.0, 0.0
    t0 = clock.now_ns()
    for _ in range(REPS):
        net.waitall([net.isend(b, small)])
        net.wait(net.irecv(b, small))
    alpha_s = (clock.now_ns() - t0) / REPS / 2 / 1e9
    t1 = clock.now_ns()
    for _ in range(REPS):
        net.waitall([net.isend(b, large)])
        net.wait(net.irecv(b, ack))
    per_msg_s = (clock.now_ns() - t1) / REPS / 1e9 - 2 * alpha_s
    return alpha_s, 8 * LARGE_BYTES / max(per_msg_s, 1e-9)


def calibrate(comm: Communicator) -> CostModel:
    """Measure alpha and bandwidth of the link classes present, install them in the tuner on every rank."""
    layout = comm.layout
    intra_peer = next((r for r in layout.local_ranks(layout.server_of[0]) if r != 0), None)
    inter_peer = next((r for r in layout.rail_ranks(layout.local_of[0]) if r != 0), None)
    cross_peer = next((r for r in range(comm.world_size) if layout.link_class(0, r) == "cross"), None)
    model = comm.tuner.model
    cross = model.cross_link

    def run() -> CostModel:
        values = np.array([model.intra.alpha_s, model.intra.rate_bps, model.inter.alpha_s, model.inter.rate_bps,
                           cross.alpha_s, cross.rate_bps])
        for i, peer in enumerate((intra_peer, inter_peer, cross_peer)):
            if peer is not None and comm.rank in (0, peer):
                alpha_s, rate_bps = _pingpong(comm, 0, peer)
                if comm.rank == 0:
                    values[2 * i:2 * i + 2] = alpha_s, rate_bps
        ring_broadcast(comm.net, list(range(comm.world_size)), values, 0, values.size)
        links = [LinkCost(float(values[i]), float(values[i + 1])) for i in (0, 2, 4)]
        new = CostModel(*links)
        comm.tuner.model = new
        return new
    return comm._submit("calibrate", comm._tag("calibrate"), run, async_op=False)
