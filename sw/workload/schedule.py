"""Pure parts of a training step: the DDP gradient buckets (which bucket starts after which layer's backward),
the step's actions in order (``step_ops``: what the runner does on the communicator and ``starpulse train
--backend sim`` times on the flow-level simulator, one definition of the overlap) and the accounting of one step's
phases (compute, communication in flight, exposed communication)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COMPUTE = "compute"
COMM = "comm"
WAIT = "wait"
KINDS = (COMPUTE, COMM, WAIT)
OP_COMPUTE = "compute"
OP_ALLTOALL = "alltoall"
OP_ALLREDUCE = "allreduce"
OP_WAIT_ALL = "wait_all"


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


@dataclass(frozen=True)
class StepOp:
    """One action of a rank's step: ``compute`` for ``ns`` (before a straggler's slow-down), a blocking MoE
    ``alltoall`` (critical path), an ``allreduce`` of bucket ``bucket`` posted asynchronously (it runs while the
    backward goes on), or ``wait_all`` for every posted allreduce."""

    kind: str
    ns: float = 0.0
    bucket: int = -1


def step_ops(layers: int, moe: bool, fwd_ns: float, bwd_ns: float, opt_ns: float,
             buckets: Sequence[Bucket]) -> list[StepOp]:
    """A training step's actions in order: forward (per layer: dispatch all-to-all, compute, combine all-to-all
    when ``moe``), backward in reverse layer order (combine's and dispatch's gradient all-to-alls around the
    compute; a bucket's allreduce posted once its last layer is done), wait for the allreduces, optimizer."""
    ops: list[StepOp] = []
    a2a = [StepOp(OP_ALLTOALL)] if moe else []
    for _layer in range(layers):
        ops += [*a2a, StepOp(OP_COMPUTE, fwd_ns), *a2a]
    ready = {b.ready_after: i for i, b in enumerate(buckets)}
    for layer in reversed(range(layers)):
        ops += [*a2a, StepOp(OP_COMPUTE, bwd_ns), *a2a]
        if layer in ready:
            ops.append(StepOp(OP_ALLREDUCE, bucket=ready[layer]))
    return ops + [StepOp(OP_WAIT_ALL), StepOp(OP_COMPUTE, opt_ns)]


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
