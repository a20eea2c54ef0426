"""Pure parts of a training step: the DDP gradient buckets (which bucket starts after which layer's backward)
and the accounting of one step's phases (compute, communication in flight, exposed communication)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COMPUTE = "compute"
COMM = "comm"
WAIT = "wait"
KINDS = (COMPUTE, COMM, WAIT)


@dataclass(frozen=True)
class Bucket:
    """Gradients of ``layers`` (backward order), ``nbytes`` of them; its allreduce starts when the backward of
    ``ready_after`` (the last of its layers) has finished."""

    layers: tuple[int, ...]
    nbytes: int

    @property
    def ready_after(self) -> int:
        return self.layers[-1]


def plan_buckets(grad_bytes: Sequence[int], cap_bytes: int) -> list[Bucket]:
    """DDP's bucketing: walk the layers in backward order (last layer first), add each layer's gradients to the
    open bucket, close it once it holds ``cap_bytes`` or more; the last bucket takes what is left.  Layers with no
    replicated gradients (0 bytes) join no bucket."""
    if cap_bytes < 1:
        raise ValueError(f"cap_bytes {cap_bytes}: expected >= 1")
    buckets: list[Bucket] = []
    layers: list[int] = []
    nbytes = 0
    for layer in reversed(range(len(grad_bytes))):
        if grad_bytes[layer] <= 0:
            continue
        layers.append(layer)
        nbytes += grad_bytes[layer]
        if nbytes >= cap_bytes:
            buckets.append(Bucket(tuple(layers), nbytes))
            layers, nbytes = [], 0
    if layers:
        buckets.append(Bucket(tuple(layers), nbytes))
    return buckets


def _union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted((a, b) for a, b in intervals if b > a):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(b - a for a, b in intervals)


def _minus(xs: list[tuple[int, int]], ys: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of the (disjoint, sorted) intervals ``xs`` not covered by the (disjoint, sorted) ``ys``."""
    out: list[tuple[int, int]] = []
    for a, b in xs:
        cur = a
        for c, d in ys:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


@dataclass(frozen=True)
class StepTimes:
    """One rank's step, in network ns: its length, the compute in it, the time communication was in flight
    (``comm_busy_ns``, overlapped or not) and the exposed part: communication in flight or the rank blocked
    waiting on it, while not computing."""

    step_ns: int
    compute_ns: int
    comm_busy_ns: int
    exposed_comm_ns: int

    @property
    def comm_share(self) -> float:
        return self.exposed_comm_ns / self.step_ns if self.step_ns > 0 else 0.0


def account_step(t0_ns: int, t1_ns: int, segments: Iterable[tuple[str, int, int]]) -> StepTimes:
    """Times of the step [t0, t1) from its (kind, start, end) segments, clipped to the step."""
    by_kind: dict[str, list[tuple[int, int]]] = {k: [] for k in KINDS}
    for kind, a, b in segments:
        by_kind[kind].append((max(a, t0_ns), min(b, t1_ns)))
    compute = _union(by_kind[COMPUTE])
    comm = _union(by_kind[COMM])
    blocked = _union(by_kind[COMM] + by_kind[WAIT])
    return StepTimes(step_ns=t1_ns - t0_ns, compute_ns=_length(compute), comm_busy_ns=_length(comm),
                     exposed_comm_ns=_length(_minus(blocked, compute)))
