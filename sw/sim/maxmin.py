"""Max-min fair rates by progressive filling, and an event-driven run of one phase of concurrent flows.

Model and its limits: flows are fluid; at every instant the active flows share every directed link max-min
fairly (progressive filling: all unfrozen flows grow together until a link saturates, its flows freeze at that
rate, repeat), times an ``efficiency`` factor standing for congestion control (1.0 = ideal max-min; DCQCN or
HPCC on the emulated fabric run below it).  A rate is recomputed only when a flow ends (event-driven), so queueing,
packet loss, PFC pauses, slow start of the rate and incast transients are not modelled; a flow's latency is its
path's propagation delay plus a per-message overhead ``alpha``, added once per step, not overlapped with data;
flow ends within 1 % of each other are taken together, and bottleneck levels within 1 % are filled as one
(``run_phase``'s ``batch``): rates and times within about 1 % of the exact max-min fluid model.
Vectorised on a sparse flow x link incidence (numpy COO arrays, ``np.bincount`` and ``np.minimum.reduceat``).
"""

from __future__ import annotations

import numpy as np

from .flow_fabric import FlowPaths

_EPS = 1e-9


def maxmin_rates(paths: FlowPaths, capacity: np.ndarray, active: np.ndarray | None = None,
                 tol: float = 0.0) -> np.ndarray:
    """Max-min fair rate (bit/s) of every flow over links of ``capacity``; inactive flows get 0.  ``tol`` > 0
    also saturates links whose fair share is within ``tol`` (relative) of the smallest, fewer rounds for many
    near-equal levels, leaving at most that fraction of their capacity unused (never over-allocating)."""
    nf = len(paths.hops)
    active = np.ones(nf, dtype=bool) if active is None else active
    rate = np.zeros(nf)
    frozen = ~active | (paths.hops == 0)
    rate[active & (paths.hops == 0)] = np.inf    # a flow that crosses no link is not limited by the fabric
    remaining = capacity.astype(np.float64).copy()
    entry_flow, entry_link = paths.flow, paths.link
    while not frozen.all():
        live = ~frozen[entry_flow]
        users = np.bincount(entry_link[live], minlength=len(capacity))
        used = users > 0
        share = np.full(len(capacity), np.inf)
        share[used] = remaining[used] / users[used]
        delta = float(share.min())
        rate[~frozen] += delta
        remaining -= delta * users
        saturated = used & ((remaining <= _EPS * capacity) | (share <= delta * (1 + tol)))
        hit = np.zeros(nf, dtype=bool)
        hit[entry_flow[live & saturated[entry_link]]] = True
        frozen |= hit
    return rate


def run_phase(paths: FlowPaths, nbytes: np.ndarray, capacity: np.ndarray, efficiency: float = 1.0,
              batch: float = 0.01) -> tuple[float, int]:
    """Time (s) until every flow of one phase has moved its ``nbytes``, all starting together, rates recomputed
    max-min at each flow's end; returns (time, number of rate computations).  Flows due to end within ``batch``
    (relative) of the next end are ended together at the latest of them, so many near-equal ends (ECMP
    collisions at scale) cost one computation; this delays such ends by at most that fraction."""
    left = nbytes.astype(np.float64) * 8
    active = left > 0
    t, solves = 0.0, 0
    while active.any():
        rate = maxmin_rates(paths, capacity, active, tol=batch) * efficiency
        solves += 1
        finish = np.full(len(left), np.inf)
        finish[active] = left[active] / rate[active]
        first = float(finish.min())
        if not np.isfinite(first):
            break
        done = active & (finish <= first * (1 + batch))
        dt = float(finish[done].max())
        left[active] -= rate[active] * dt
        left[done] = 0.0
        active &= ~done
        t += dt
    return t, solves
