"""One rank of the training workload: forward, backward with DDP-style bucketed gradient allreduce overlapped,
MoE dispatch/combine all-to-all on the critical path, optimizer step; every phase timed on the one clock.

Compute is a clock sleep of FLOPs / rate (dilated like everything else), the rate being the GPU's slowed by the
emulated link's ratio to the real NIC (``spec``).  Real buffers (float16, small integers so sums are exact) move
through ``sw.collectives`` with the sizes the spec implies and are checked (``wrong``).  At the end the ranks
gather every rank's figures through the communicator, so rank 0 holds the whole report.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sw.clock import Clock, get_clock
from sw.clock.lag import LagStats, mtu_serialization_ns, register
from sw.collectives import Communicator, Work
from sw.collectives.bench import nic_payload_bytes
from sw.units.telemetry import TelemetryStore

from .schedule import (
    COMM,
    COMPUTE,
    KINDS,
    OP_ALLREDUCE,
    OP_ALLTOALL,
    OP_COMPUTE,
    WAIT,
    Bucket,
    StepOp,
    account_step,
    plan_buckets,
    step_ops,
)
from .spec import BWD_PER_FWD, FLOPS_PER_PARAM_TOKEN_FWD, OPTIMIZER_FLOPS_PER_PARAM, ModelSpec, resolve_for_world

DTYPE = np.float16
PLOT_STEPS = 3
"""Measured steps whose per-rank timeline the report keeps (for the plot)."""
VALUE_MOD = 251
"""All-to-all payloads are integers below this (exact in float16)."""


@dataclass(frozen=True)
class StepPlan:
    """What one rank does every step, from the spec and the job: compute per phase (ns before slow-down),
    the gradient buckets and the all-to-all size."""

    spec: ModelSpec
    world: int
    line_rate_bps: float
    fwd_ns: float
    bwd_ns: float
    opt_ns: float
    buckets: list[Bucket]
    a2a_elems: int

    def ops(self) -> list[StepOp]:
        """The step's actions in order (``schedule.step_ops``)."""
        return step_ops(self.spec.layers, self.spec.moe, self.fwd_ns, self.bwd_ns, self.opt_ns, self.buckets)

    def to_json(self) -> dict[str, Any]:
        return {"model": self.spec.to_json(), "world": self.world, "line_rate_bps": self.line_rate_bps,
                "fwd_layer_ns": self.fwd_ns, "bwd_layer_ns": self.bwd_ns, "optimizer_ns": self.opt_ns,
                "buckets": [{"layers": list(b.layers), "bytes": b.nbytes} for b in self.buckets],
                "alltoall_bytes": self.a2a_elems * np.dtype(DTYPE).itemsize,
                "alltoalls_per_step": 4 * self.spec.layers if self.spec.moe else 0}


def plan_step(spec: ModelSpec, world: int, line_rate_bps: float) -> StepPlan:
    """The per-rank plan of ``spec`` on ``world`` ranks whose NICs run at ``line_rate_bps``."""
    spec = resolve_for_world(spec, world)
    assert spec.dp is not None
    tokens = spec.tokens_per_step // spec.dp
    rate_flops = spec.gpu_tflops * 1e12 * line_rate_bps / (spec.nic_gbps * 1e9)
    fwd_flops = FLOPS_PER_PARAM_TOKEN_FWD * spec.active_params_per_layer() * tokens * spec.scale
    ep = spec.ep or 1
    held = spec.layers * (spec.dense_params_per_layer() + spec.expert_params_per_layer(ep))
    grad_bytes = [math.ceil(spec.dense_params_per_layer() * spec.bytes_per_param * spec.scale)] * spec.layers
    itemsize = np.dtype(DTYPE).itemsize
    grad_bytes = [itemsize * max(1, math.ceil(b / itemsize)) for b in grad_bytes]
    cap = max(1, round(spec.bucket_mb * 1e6 * spec.scale))
    a2a = 0
    if spec.moe:
        a2a_bytes = tokens * spec.top_k * spec.hidden * spec.bytes_per_param * spec.scale
        a2a = world * max(1, math.ceil(a2a_bytes / itemsize / world))
    return StepPlan(spec=spec, world=world, line_rate_bps=line_rate_bps, fwd_ns=fwd_flops / rate_flops * 1e9,
                    bwd_ns=BWD_PER_FWD * fwd_flops / rate_flops * 1e9,
                    opt_ns=OPTIMIZER_FLOPS_PER_PARAM * held * spec.scale / rate_flops * 1e9,
                    buckets=plan_buckets(grad_bytes, cap), a2a_elems=a2a)


@dataclass
class StepRecord:
    """The record of one step on a rank (network ns): its start, end and (kind, start, end) segments."""

    t0_ns: int = 0
    t1_ns: int = 0
    segments: list[tuple[str, int, int]] = field(default_factory=list)
    collectives: list[tuple[str, int, int, int, int, int, int]] = field(default_factory=list)
    """(what, bytes, posted, started, ended, wait began, wait ended) of each collective, network ns."""


class RankWorkload:
    """Runs ``plan`` on ``comm``'s rank; ``factor()`` is read between steps (the straggler hook)."""

    def __init__(self, comm: Communicator, plan: StepPlan, *, clock: Clock | None = None,
                 factor: Callable[[], float] = lambda: 1.0) -> None:
        self.comm = comm
        self.plan = plan
        self.clock = clock or get_clock()
        self.factor = factor
        self.wrong = 0
        self.lag = register(f"workload compute rank {comm.rank}", LagStats(mtu_serialization_ns(plan.line_rate_bps)))
        """How late each compute phase ended against its planned length (part of the run's ``fidelity``)."""
        self._grads = [np.empty(b.nbytes // np.dtype(DTYPE).itemsize, DTYPE) for b in plan.buckets]
        n = plan.world
        self._a2a_send = np.empty(plan.a2a_elems, DTYPE)
        self._a2a_recv = np.empty(plan.a2a_elems, DTYPE)
        self._block = plan.a2a_elems // n if n else 0

    # --- phases ---------------------------------------------------------------------------------------------
    def _compute(self, step: StepRecord, ns: float, factor: float) -> None:
        t0 = self.clock.now_ns()
        self.clock.sleep_ns(ns * factor)
        t1 = self.clock.now_ns()
        self.lag.record(max(0, round(t1 - t0 - ns * factor)))
        step.segments.append((COMPUTE, t0, t1))

    def _wait(self, step: StepRecord, work: Work, nbytes: int, post_ns: int) -> None:
        t0 = self.clock.now_ns()
        work.wait()
        t1 = self.clock.now_ns()
        step.segments.append((WAIT, t0, t1))
        assert work.start_ns is not None and work.end_ns is not None
        step.segments.append((COMM, work.start_ns, work.end_ns))
        step.collectives.append((work.what, nbytes, post_ns, work.start_ns, work.end_ns, t0, t1))

    def _alltoall(self, step: StepRecord, seq: int) -> None:
        """One MoE all-to-all on the critical path: block j to rank j, checked on arrival."""
        n, b, r = self.plan.world, self._block, self.comm.rank
        self._a2a_send.reshape(n, b)[...] = ((r * 7 + np.arange(n) + seq) % VALUE_MOD)[:, None]
        post_ns = self.clock.now_ns()
        work = self.comm.alltoall(self._a2a_send, self._a2a_recv, async_op=True)
        self._wait(step, work, self._a2a_send.nbytes, post_ns)
        want = ((np.arange(n) * 7 + r + seq) % VALUE_MOD)[:, None]
        self.wrong += int(np.count_nonzero(self._a2a_recv.reshape(n, b) != want))

    def run_step(self, index: int) -> StepRecord:
        """One training step (the plan's ``ops``); returns its timed segments."""
        p, factor = self.plan, self.factor()
        step = StepRecord(t0_ns=self.clock.now_ns())
        seq = index * 4 * p.spec.layers
        value = (self.comm.rank + index) % 4 + 1
        want = sum((r + index) % 4 + 1 for r in range(p.world))
        pending: list[tuple[Work, np.ndarray, int]] = []
        for op in p.ops():
            if op.kind == OP_COMPUTE:
                self._compute(step, op.ns, factor)
            elif op.kind == OP_ALLTOALL:                                # MoE dispatch/combine (or its gradient)
                self._alltoall(step, seq)
                seq += 1
            elif op.kind == OP_ALLREDUCE:                               # a full bucket: reduce it meanwhile
                buf = self._grads[op.bucket]
                buf.fill(value)
                post_ns = self.clock.now_ns()
                pending.append((self.comm.allreduce(buf, op="sum", async_op=True), buf, post_ns))
            else:                                                       # before the optimizer
                for work, buf, post_ns in pending:
                    self._wait(step, work, buf.nbytes, post_ns)
                    self.wrong += int(np.count_nonzero(buf != want))
                pending = []
        step.t1_ns = self.clock.now_ns()
        return step


class NicDeltas:
    """This rank's RoCE NIC for the operations store's ``nics`` table: per remote peer (its QP) the counters'
    deltas since the last ``rows`` call, and the NIC port's pacing and line rate (none on TCP/shm).  Called at
    every step's end and by ``NicSampler`` in between (hence the lock)."""

    def __init__(self, comm: Communicator) -> None:
        self.comm = comm
        self._last: dict[int, dict[str, int]] = {}
        self._lock = threading.Lock()

    def rows(self, index: int, t_ns: int) -> list[dict[str, int]]:
        with self._lock:
            return self._rows(index, t_ns)

    def _rows(self, index: int, t_ns: int) -> list[dict[str, int]]:
        out = []
        for transport in self.comm.net.transports:
            counters = getattr(transport, "nic_counters", None)
            if counters is None:
                continue
            rate_bps, line_rate_bps = transport.port_rate_bps()
            for peer, now in counters().items():
                prev = self._last.get(peer, {})
                out.append({"rank": self.comm.rank, "step": index, "t_ns": t_ns, "peer": peer,
                            **{k: v - prev.get(k, 0) for k, v in now.items()}, "rate_bps": rate_bps,
                            "line_rate_bps": line_rate_bps})
                self._last[peer] = now
        return out


class NicSampler:
    """A thread writing this rank's NIC rows into the store every ``interval_wall_s`` (its own connection), so a
    step stalled by retransmission timeouts still shows its NIC's counters before it ends; ``step`` is the step
    in progress."""

    def __init__(self, store: TelemetryStore, nics: NicDeltas, clock: Clock, interval_wall_s: float = 0.5) -> None:
        self.store = TelemetryStore(store.path)
        self.nics = nics
        self.clock = clock
        self.interval_wall_s = interval_wall_s
        self.step = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nic-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_wall_s):
            rows = self.nics.rows(self.step, self.clock.box_ns())
            if any(r["retx_pkts"] or r["timeouts"] for r in rows):   # only what the step-end rows cannot wait for
                self.store.add_nics(rows)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.store.close()


def set_nic_rate_share(comm: Communicator, share: float) -> None:
    """Pace this rank's RoCE NIC at ``share`` of its line rate (the slow-NIC fault hook; no-op on TCP/shm)."""
    for transport in comm.net.transports:
        setter = getattr(transport, "set_rate_share", None)
        if setter is not None:
            setter(share)


def record_step(store: TelemetryStore, comm: Communicator, clock: Clock, index: int, step: StepRecord,
                nics: NicDeltas | None = None) -> None:
    """One step of this rank into the operations store: its phases, every collective (op, bytes, algorithm,
    posted/started/ended, how long the rank waited on it) and its NIC's counters, on the box's time base
    (``Clock.box_ns``)."""
    st = account_step(step.t0_ns, step.t1_ns, step.segments)
    box = clock.box_ns
    colls = []
    for seq, (what, nbytes, post, start, end, w0, w1) in enumerate(step.collectives):
        op, _, algo = what.partition("(")
        colls.append({"rank": comm.rank, "step": index, "seq": seq, "op": op, "nbytes": nbytes,
                      "algo": algo.rstrip(")"), "post_ns": box(post), "start_ns": box(start), "end_ns": box(end),
                      "wait_ns": w1 - w0})
    store.add_step({"rank": comm.rank, "step": index, "server": comm.server, "gpu": comm.local_rank,
                    "t0_ns": box(step.t0_ns), "t1_ns": box(step.t1_ns), "compute_ns": st.compute_ns,
                    "comm_busy_ns": st.comm_busy_ns, "exposed_comm_ns": st.exposed_comm_ns,
                    "wait_ns": sum(b - a for k, a, b in step.segments if k == WAIT)}, colls,
                   nics.rows(index, box(step.t1_ns)) if nics is not None else ())


def _gather(comm: Communicator, row: np.ndarray) -> np.ndarray:
    """Every rank's equal-length int64 ``row``, stacked in rank order."""
    out = np.empty(row.size * comm.world_size, np.int64)
    comm.allgather(np.ascontiguousarray(row, np.int64), out)
    return out.reshape(comm.world_size, row.size)


def run_workload(comm: Communicator, plan: StepPlan, steps: int, warmup: int, *, clock: Clock | None = None,
                 factor: Callable[[], float] = lambda: 1.0, progress: Callable[[str], None] | None = None,
                 telemetry: TelemetryStore | None = None, nic_share: Callable[[], float] | None = None,
                 ) -> dict[str, Any]:
    """``warmup`` + ``steps`` steps on this rank, then the job's report (every rank gets the same one).

    Per rank: mean step time, compute, communication in flight, exposed communication (in flight while not
    computing), ``comm_share`` = exposed / step, ``link_load`` = NIC payload bytes x 8 / (time communication was
    in flight x line rate).  Job: ``step_s`` = mean over steps of the slowest rank's step; ``comm_share`` and
    ``link_load`` the means over ranks (``link_load`` over ranks that use their NIC).  ``telemetry``: every step
    (warm-up too) is recorded there as it ends (``record_step``).  ``nic_share()`` is read before every step: the
    share of its line rate this rank's NIC paces at (the slow-NIC hook)."""
    clock = clock or get_clock()
    work = RankWorkload(comm, plan, clock=clock, factor=factor)
    nics = NicDeltas(comm) if telemetry is not None else None
    sampler = NicSampler(telemetry, nics, clock) if telemetry is not None and nics is not None else None
    share = 1.0

    def pace() -> None:
        nonlocal share
        now = nic_share() if nic_share is not None else 1.0
        if now != share:
            share = now
            set_nic_rate_share(comm, share)

    try:
        records, factors, nic, wrong = _run_steps(comm, work, steps, warmup, clock, telemetry, nics, sampler, pace,
                                                  progress)
    finally:
        if sampler is not None:
            sampler.stop()
    row, nscalar, nshown = rank_row(records, nic, wrong, max(factors or [1.0]), comm.server, comm.local_rank)
    table = _gather(comm, row)
    return job_report(plan, steps, warmup, table, nscalar, nshown)


def rank_row(records: list[StepRecord], nic_bytes: int, wrong: int, factor: float, server: int, gpu: int
             ) -> tuple[np.ndarray, int, int]:
    """One rank's measured steps as its row of ``job_report``'s table, with the row's number of totals and of
    plotted steps: (row, nscalar, nshown)."""
    times = [account_step(r.t0_ns, r.t1_ns, r.segments) for r in records]
    scalars = [sum(t.step_ns for t in times), sum(t.compute_ns for t in times), sum(t.comm_busy_ns for t in times),
               sum(t.exposed_comm_ns for t in times), nic_bytes, wrong, round(factor * 1000), server, gpu]
    shown = records[:PLOT_STEPS]
    base = shown[0].t0_ns if shown else 0
    kinds = {k: i for i, k in enumerate(KINDS)}
    segs = [v for r in shown for kind, a, b in r.segments for v in (kinds[kind], a - base, b - base)]
    ends = [r.t1_ns - base for r in shown]
    return np.array(scalars + [t.step_ns for t in times] + ends + segs, np.int64), len(scalars), len(shown)


def _run_steps(comm: Communicator, work: RankWorkload, steps: int, warmup: int, clock: Clock,
               telemetry: TelemetryStore | None, nics: NicDeltas | None, sampler: NicSampler | None,
               pace: Callable[[], None], progress: Callable[[str], None] | None,
               ) -> tuple[list[StepRecord], list[float], int, int]:
    """The warm-up and measured steps, each recorded into ``telemetry`` as it ends; the measured steps, their
    compute factors, the NIC payload bytes and wrong results of the measured steps."""
    for i in range(warmup):
        pace()
        if sampler is not None:
            sampler.step = i
        done = work.run_step(i)
        if telemetry is not None:
            record_step(telemetry, comm, clock, i, done, nics)
    nic0 = nic_payload_bytes(comm)
    wrong0 = work.wrong
    records: list[StepRecord] = []
    factors: list[float] = []
    for i in range(steps):
        factors.append(work.factor())
        pace()
        if sampler is not None:
            sampler.step = warmup + i
        records.append(work.run_step(warmup + i))
        if telemetry is not None:
            record_step(telemetry, comm, clock, warmup + i, records[-1], nics)
        if progress is not None and comm.rank == 0:
            st = account_step(records[-1].t0_ns, records[-1].t1_ns, records[-1].segments)
            progress(f"step {i + 1}/{steps}: {st.step_ns / 1e6:.2f} ms, exposed comm {st.exposed_comm_ns / 1e6:.2f} "
                     f"ms (rank 0)")
    return records, factors, nic_payload_bytes(comm) - nic0, work.wrong - wrong0


def job_report(plan: StepPlan, steps: int, warmup: int, table: np.ndarray, nscalar: int, nshown: int
               ) -> dict[str, Any]:
    """The job's report from every rank's row (``nscalar`` totals: step, compute, comm busy, exposed ns, NIC bytes,
    wrong, compute factor x 1000, server, GPU; then each step's ns, the ``nshown`` plotted steps' ends and their
    segments as (kind, start, end) triples relative to the first one's start)."""
    n = max(steps, 1)
    per_rank: list[dict[str, Any]] = []
    timeline: list[dict[str, Any]] = []
    for rank, row in enumerate(table.tolist()):
        step_ns, compute_ns, busy_ns, exposed_ns, nic, wrong, factor_milli, server, gpu = row[:nscalar]
        load = 8 * nic / (busy_ns / 1e9) / plan.line_rate_bps if busy_ns > 0 and plan.line_rate_bps > 0 else 0.0
        per_rank.append({"rank": rank, "server": server, "gpu": gpu, "step_s": step_ns / n / 1e9,
                         "compute_s": compute_ns / n / 1e9, "comm_busy_s": busy_ns / n / 1e9,
                         "exposed_comm_s": exposed_ns / n / 1e9,
                         "comm_share": exposed_ns / step_ns if step_ns > 0 else 0.0, "link_load": load,
                         "nic_bytes_per_step": nic / n, "compute_factor": factor_milli / 1000, "wrong": wrong})
        ends = row[nscalar + steps: nscalar + steps + nshown]
        flat = row[nscalar + steps + nshown:]
        timeline.append({"rank": rank, "step_ends_ns": ends,
                         "segments": [(KINDS[flat[i]], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]})
    steps_ns = table[:, nscalar: nscalar + steps].max(axis=0).tolist() if steps else []
    using_nic = [r["link_load"] for r in per_rank if r["nic_bytes_per_step"] > 0]
    return {
        "step_s": sum(steps_ns) / n / 1e9,
        "comm_share": sum(r["comm_share"] for r in per_rank) / len(per_rank),
        "link_load": sum(using_nic) / len(using_nic) if using_nic else 0.0,
        "wrong": sum(r["wrong"] for r in per_rank),
        "steps_s": [s / 1e9 for s in steps_ns],
        "per_rank": per_rank,
        "config": {**plan.to_json(), "steps": steps, "warmup": warmup},
        "timeline": timeline,
    }


def stderr_progress(line: str) -> None:
    """Progress lines go to stderr (stdout stays for results)."""
    print(line, file=sys.stderr, flush=True)
