"""The benchmark core of ``starpulse bench OP``, shaped like nccl-tests: a size sweep of one collective, out of
place and in place, timed in network time (``sw.clock``), checked against numpy, reported as algbw/busbw.

Sizes follow nccl-tests: ``size`` is the per-rank bytes of the larger buffer (allgather: the gathered output;
reducescatter: the input; alltoall: the whole send buffer), ``count`` its elements.  algbw = size / time;
busbw = algbw x factor (allreduce 2(n-1)/n; allgather, reducescatter, alltoall (n-1)/n; others 1).  ``time`` is
the mean over ``iters`` of one operation, the maximum over ranks.  ``nic_bps``: payload the busiest rank sent to
other servers per operation / time, what its NIC really carried (hierarchical algorithms keep the rest of busbw
inside the server).  Rates in JSON are bit/s (``*_bps``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sw.clock import Clock, get_clock
from sw.roce.wire.errors import DROP_REASONS

from .autotune import choice_lines
from .comm import Communicator
from .dtypes import DTYPE_CODES, REDUCE_OPS, bf16_to_f32, f32_to_bf16
from .tuner import ALGOS

DTYPE_ALIASES = {"float": "float32", "half": "float16", "int": "int32", "bf16": "bfloat16"}
FLOAT_RTOL = {"float32": 1e-6, "float16": 1e-3, "bfloat16": 1e-2}
"""Relative tolerance of the float check: reductions round per step in the buffer's type (avg divides once)."""
MAX_BYTES = 1 << 30
INTRA_PROBE_BYTES = 1 << 20
"""Bytes rank 0 sends a local peer over shared memory to measure the NVLink stand-in's rate (1 MiB: 9 ms of
network time at 9 x 100 Mb/s, well past the throttle's idle burst)."""


class CollBenchError(ValueError):
    """A bad benchmark flag: the message names the flag, the value and what is allowed."""

    is_user_error = True


# --- one descriptor per collective (as nccl-tests' per-collective struct) -------------------------------------
@dataclass(frozen=True)
class CollectiveSpec:
    """What the bench needs to know of one collective: buffer shapes, busbw factor, reference result, the call.

    ``count`` is the elements of the larger buffer; a ``send_block``/``recv_block`` buffer is ``count / n`` of it
    (in place: this rank's block of the larger one).  ``expected(inputs, redop, root, rank, block)`` is what
    ``rank`` must receive from the ranks' ``inputs`` (None: nothing to check on this rank)."""

    name: str
    bus_factor: Callable[[int], float]
    expected: Callable[[list[np.ndarray], str, int, int, int], np.ndarray | None]
    call: Callable[[_Case, bool], Any]
    split: bool = False          # count a multiple of the world size: every rank owns a block
    send_block: bool = False
    recv_block: bool = False
    reduces: bool = False
    rooted: bool = False


def _call_broadcast(k: _Case, async_op: bool) -> Any:
    if not k.in_place and k.comm.rank == k.p.root:
        k.recv[...] = k.send
    return k.comm.broadcast(k.recv, k.p.root, algo=k.p.algo, async_op=async_op)


def _out(k: _Case) -> np.ndarray | None:
    """The output argument of the collectives that take ``None`` for in place."""
    return None if k.in_place else k.recv


COLLECTIVES: dict[str, CollectiveSpec] = {c.name: c for c in (
    CollectiveSpec(
        "allreduce", lambda n: 2 * (n - 1) / n,
        lambda ins, redop, root, me, block: _reduce_all(ins, redop),
        lambda k, a: k.comm.allreduce(k.send, _out(k), k.p.redop, algo=k.p.algo, async_op=a),
        reduces=True),
    CollectiveSpec(
        "broadcast", lambda n: 1.0,
        lambda ins, redop, root, me, block: ins[root],
        _call_broadcast, rooted=True),
    CollectiveSpec(
        "reduce", lambda n: 1.0,
        lambda ins, redop, root, me, block: _reduce_all(ins, redop) if me == root else None,
        lambda k, a: k.comm.reduce(k.send, _out(k), k.p.redop, k.p.root, algo=k.p.algo, async_op=a),
        reduces=True, rooted=True),
    CollectiveSpec(
        "allgather", lambda n: (n - 1) / n,
        lambda ins, redop, root, me, block: np.concatenate(ins),
        lambda k, a: k.comm.allgather(k.send, k.recv, algo=k.p.algo, async_op=a),
        split=True, send_block=True),
    CollectiveSpec(
        "reducescatter", lambda n: (n - 1) / n,
        lambda ins, redop, root, me, block: _reduce_all(ins, redop)[me * block:(me + 1) * block],
        lambda k, a: k.comm.reducescatter(k.send, k.recv, k.p.redop, algo=k.p.algo, async_op=a),
        split=True, recv_block=True, reduces=True),
    CollectiveSpec(
        "alltoall", lambda n: (n - 1) / n,
        lambda ins, redop, root, me, block: np.concatenate([x[me * block:(me + 1) * block] for x in ins]),
        lambda k, a: k.comm.alltoall(k.send, _out(k), algo=k.p.algo, async_op=a),
        split=True),
)}
OPS = tuple(COLLECTIVES)
REDUCTIONS = tuple(name for name, c in COLLECTIVES.items() if c.reduces)
ROOTED = tuple(name for name, c in COLLECTIVES.items() if c.rooted)


def collective(op: str) -> CollectiveSpec:
    """The descriptor of ``op``; CollBenchError naming the allowed ones if there is none."""
    try:
        return COLLECTIVES[op]
    except KeyError:
        raise CollBenchError(f"op {op!r}: allowed {', '.join(OPS)}") from None


def bus_factor(op: str, nranks: int) -> float:
    """nccl-tests' busbw / algbw ratio: the share of the data each rank's link must carry."""
    return collective(op).bus_factor(nranks)


def sweep_bytes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """Sizes min, min x f, ... up to max (nccl-tests -b/-e/-f)."""
    if min_bytes < 1:
        raise CollBenchError(f"-b {min_bytes}: must be at least 1 byte")
    if max_bytes < min_bytes:
        raise CollBenchError(f"-e {max_bytes}: must be >= -b {min_bytes}")
    if max_bytes > MAX_BYTES:
        raise CollBenchError(f"-e {max_bytes}: at most {MAX_BYTES} bytes (1G) per rank here")
    if factor < 2 and min_bytes != max_bytes:
        raise CollBenchError(f"-f {factor}: the step factor must be >= 2")
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        if factor < 2:
            break
        size *= factor
    return out


@dataclass(frozen=True)
class BenchParams:
    """One sweep: the collective, sizes, iterations, checking, element type, reduction, root and algorithm."""

    op: str = "allreduce"
    min_bytes: int = 8 * 1024
    max_bytes: int = 64 * 1024 * 1024
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    check: bool = True
    redop: str = "sum"
    dtype: str = "float32"
    root: int = 0
    algo: str | None = None
    line_rate_bps: float | None = None

    def __post_init__(self) -> None:
        collective(self.op)
        if self.dtype not in DTYPE_CODES:
            raise CollBenchError(f"-d {self.dtype}: allowed {', '.join(DTYPE_CODES)} (or float, half, int, bf16)")
        if self.redop not in REDUCE_OPS:
            raise CollBenchError(f"-o {self.redop}: allowed {', '.join(REDUCE_OPS)}")
        if self.redop == "avg" and self.dtype in ("int32", "int64") and self.op in REDUCTIONS:
            raise CollBenchError(f"-o avg: not defined for -d {self.dtype} (use a float type)")
        if self.iters < 1:
            raise CollBenchError(f"-n {self.iters}: at least 1 iteration")
        if self.warmup < 0:
            raise CollBenchError(f"-w {self.warmup}: must be >= 0")
        if self.root < 0:
            raise CollBenchError(f"-r {self.root}: must be a rank >= 0")
        if self.algo is not None and self.algo not in ALGOS[self.op]:
            raise CollBenchError(f"-A {self.algo}: unknown for {self.op} (allowed: {', '.join(ALGOS[self.op])})")
        sweep_bytes(self.min_bytes, self.max_bytes, self.factor)

    @property
    def sizes(self) -> list[int]:
        return sweep_bytes(self.min_bytes, self.max_bytes, self.factor)

    @property
    def itemsize(self) -> int:
        return 2 if self.dtype == "bfloat16" else np.dtype(self.dtype).itemsize

    def np_dtype(self) -> np.dtype:
        return np.dtype(np.uint16) if self.dtype == "bfloat16" else np.dtype(self.dtype)


def dtype_from_flag(text: str) -> str:
    """'-d' value to a library dtype name (nccl-tests' float/half/int accepted)."""
    return DTYPE_ALIASES.get(text, text)


def element_count(op: str, size_bytes: int, itemsize: int, nranks: int) -> int:
    """Elements of the size's buffer: a multiple of the world size for the ops that split it (at least one each)."""
    count = max(1, size_bytes // itemsize)
    if collective(op).split:
        count = max(nranks, count - count % nranks)
    return count


# --- data and expected results --------------------------------------------------------------------------------
def _values(rank: int, count: int, redop: str, seed: int) -> np.ndarray:
    """Rank ``rank``'s check data as float64 small integers (exact in every type, no overflow for n <= 64)."""
    rng = np.random.default_rng([seed, rank, count])
    if redop == "prod":
        return np.where(rng.random(count) < 0.2, 2.0, 1.0)   # products stay <= 2^n
    return rng.integers(0, 8, count).astype(np.float64)


def _to_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return f32_to_bf16(values.astype(np.float32))
    return values.astype(dtype)


def _as_float(buf: np.ndarray, dtype: str) -> np.ndarray:
    return bf16_to_f32(buf).astype(np.float64) if dtype == "bfloat16" else buf.astype(np.float64)


def _reduce_all(parts: list[np.ndarray], redop: str) -> np.ndarray:
    stack = np.stack(parts)
    if redop in ("sum", "avg"):
        out = stack.sum(axis=0)
        return out / len(parts) if redop == "avg" else out
    return {"prod": np.prod, "min": np.min, "max": np.max}[redop](stack, axis=0)


def count_wrong(got: np.ndarray, want: np.ndarray, dtype: str) -> int:
    """Elements of ``got`` that differ from ``want`` (float64): bitwise for integers, FLOAT_RTOL for floats."""
    g = _as_float(got, dtype)
    if dtype in ("int32", "int64"):
        return int(np.count_nonzero(g != want))
    rtol = FLOAT_RTOL[dtype]
    return int(np.count_nonzero(~(np.abs(g - want) <= rtol * np.abs(want) + rtol)))


# --- one size -------------------------------------------------------------------------------------------------
class _Case:
    """Buffers and calls of one operation at one size, out of place or in place, on one rank."""

    def __init__(self, comm: Communicator, p: BenchParams, count: int, in_place: bool) -> None:
        self.comm, self.p, self.count, self.in_place = comm, p, count, in_place
        n, dt = comm.world_size, p.np_dtype()
        self.spec = spec = COLLECTIVES[p.op]
        self.send_count = count // n if spec.send_block else count
        self.recv_count = count // n if spec.recv_block else count
        if in_place:
            self.buf = np.zeros(count, dt)
            mine = slice(comm.rank * (count // n), (comm.rank + 1) * (count // n))
            self.send = self.buf[mine] if spec.send_block else self.buf
            self.recv = self.buf[mine] if spec.recv_block else self.buf
        else:
            self.send, self.recv = np.zeros(self.send_count, dt), np.zeros(self.recv_count, dt)

    def issue(self, async_op: bool) -> Any:
        return self.spec.call(self, async_op)

    def time_ns(self, clock: Clock) -> tuple[float, float]:
        """Mean network time of one operation over ``iters`` (after ``warmup``), issued back to back, and the
        payload bytes per operation this rank sent to other servers (through its NIC)."""
        for _ in range(self.p.warmup):
            self.issue(False)
        self.comm.barrier()
        before = nic_payload_bytes(self.comm)
        t0 = clock.now_ns()
        works = [self.issue(True) for _ in range(self.p.iters)]
        for w in works:
            w.wait()
        return (clock.now_ns() - t0) / self.p.iters, (nic_payload_bytes(self.comm) - before) / self.p.iters

    def check(self, seed: int) -> int:
        """Run once on known data; this rank's wrong elements against the numpy result."""
        p, n, me = self.p, self.comm.world_size, self.comm.rank
        inputs = [_values(r, self.send_count, p.redop, seed) for r in range(n)]
        self.recv[...] = 0
        self.send[...] = _to_dtype(inputs[me], p.dtype)
        self.issue(False)
        want = self.spec.expected(inputs, p.redop, p.root, me, self.count // n)
        if want is None:
            return 0
        if p.redop != "avg" or not self.spec.reduces:
            want = _as_float(_to_dtype(want, p.dtype), p.dtype)
        return count_wrong(self.recv, want, p.dtype)


def nic_payload_bytes(comm: Communicator) -> int:
    """Payload bytes this rank has sent to ranks of other servers (the traffic its NIC carries)."""
    return sum(v for link, v in comm.counters().items() if link != "intra")


def _max_over_ranks(comm: Communicator, value_ns: float) -> float:
    buf = np.array([round(value_ns)], np.int64)
    comm.allreduce(buf, op="max")
    return float(buf[0])


def _sum_over_ranks(comm: Communicator, value: int) -> int:
    buf = np.array([value], np.int64)
    comm.allreduce(buf, op="sum")
    return int(buf[0])


def measure(comm: Communicator, p: BenchParams, count: int, in_place: bool, clock: Clock,
            seed: int = 1) -> dict[str, Any]:
    """Time and (with ``check``) verify one size in one mode; the same figures on every rank."""
    case = _Case(comm, p, count, in_place)
    local_ns, local_nic_bytes = case.time_ns(clock)
    algo = comm.last_choice[0] if comm.last_choice else ""   # before the bookkeeping allreduces choose theirs
    time_ns = _max_over_ranks(comm, local_ns)
    nic_bytes = _max_over_ranks(comm, local_nic_bytes)
    wrong = _sum_over_ranks(comm, case.check(seed)) if p.check else -1
    size_bytes = count * p.itemsize
    algbw_bps = 8 * size_bytes / (time_ns / 1e9) if time_ns > 0 else 0.0
    busbw_bps = algbw_bps * bus_factor(p.op, comm.world_size)
    nic_bps = 8 * nic_bytes / (time_ns / 1e9) if time_ns > 0 else 0.0
    return {"time_us": time_ns / 1e3, "algbw_bps": algbw_bps, "busbw_bps": busbw_bps, "wrong": wrong,
            "algo": algo, "nic_bps": nic_bps}


def measure_intra(comm: Communicator, clock: Clock, nbytes: int = INTRA_PROBE_BYTES) -> tuple[float | None, float]:
    """(configured, measured) shared-memory rate of rank 0, in bit/s of network time: rank 0 sends ``nbytes`` to
    its first local peer, which answers with an empty message (0.0 measured when rank 0 has no local peer)."""
    shm = next((t for t in comm.net.transports if t.name == "shm"), None)
    throttle = getattr(shm, "throttle", None)
    configured = throttle.rate_bps if throttle is not None else None
    peers = [r for r in comm.layout.local_ranks(comm.layout.server_of[0]) if r != 0]
    comm.barrier()
    elapsed_ns = 0
    if peers and comm.rank in (0, peers[0]):
        data, ack = np.zeros(nbytes // 4, np.int32), np.zeros(0, np.int32)
        if comm.rank == 0:
            t0 = clock.now_ns()
            comm.send(data, peers[0])
            comm.recv(ack, peers[0])
            elapsed_ns = clock.now_ns() - t0
        else:
            comm.recv(data, 0)
            comm.send(ack, 0)
    elapsed_ns = round(_max_over_ranks(comm, elapsed_ns))
    measured = 8e9 * nbytes / elapsed_ns if elapsed_ns > 0 else 0.0
    return configured, measured


def nic_rx_drops(comm: Communicator) -> dict[str, int]:
    """Frames the ranks' RoCE NICs received and could not parse, summed over ranks by reason (only the
    reasons that occurred); every rank calls it."""
    local = dict.fromkeys(DROP_REASONS, 0)
    for transport in comm.net.transports:
        rx_drops = getattr(transport, "rx_drops", None)
        for reason, n in (rx_drops() if rx_drops else {}).items():
            local[reason] = local.get(reason, 0) + n
    buf = np.array([local[r] for r in DROP_REASONS], np.int64)
    comm.allreduce(buf, op="sum")
    return {r: int(n) for r, n in zip(DROP_REASONS, buf, strict=True) if n}


# --- the sweep ------------------------------------------------------------------------------------------------
def run_bench(comm: Communicator, p: BenchParams, *, on_row: Callable[[str], None] | None = None,
              clock: Clock | None = None) -> dict[str, Any]:
    """The whole sweep on this rank (every rank calls it); rows go to ``on_row`` (give it on rank 0 only).

    Returns the report (``to_json`` shape without fabric counters)."""
    clock = clock or get_clock()
    n = comm.world_size
    if p.op in ROOTED and p.root >= n:
        raise CollBenchError(f"-r {p.root}: must be a rank in 0..{n - 1}")
    rows: list[dict[str, Any]] = []
    emit = on_row or (lambda _line: None)
    intra_rate, intra_measured = measure_intra(comm, clock)
    if intra_measured:
        rate = "unthrottled" if intra_rate is None else f"{intra_rate / 1e6:g} Mb/s"
        emit(f"# shared memory (NVLink stand-in): {rate} configured, {intra_measured / 1e6:.1f} Mb/s measured "
             f"({INTRA_PROBE_BYTES} B, rank 0 to a local peer)")
    for line in header_lines(p, comm):
        emit(line)
    for size in p.sizes:
        count = element_count(p.op, size, p.itemsize, n)
        oop = measure(comm, p, count, False, clock)
        ip = measure(comm, p, count, True, clock)
        row = {"size_bytes": count * p.itemsize, "count": count, "type": p.dtype,
               "redop": p.redop if p.op in REDUCTIONS else "none", "root": p.root if p.op in ROOTED else -1,
               "time_us": oop["time_us"], "algbw_bps": oop["algbw_bps"], "busbw_bps": oop["busbw_bps"],
               "wrong": max(oop["wrong"], 0) + max(ip["wrong"], 0) if p.check else -1, "algo": oop["algo"],
               "out_of_place": {k: oop[k] for k in ("time_us", "algbw_bps", "busbw_bps", "wrong")},
               "in_place": {k: ip[k] for k in ("time_us", "algbw_bps", "busbw_bps", "wrong")}}
        row["nic_bps"] = oop["nic_bps"]
        if p.line_rate_bps:
            row["busbw_frac_line"] = oop["busbw_bps"] / p.line_rate_bps
            row["nic_frac_line"] = oop["nic_bps"] / p.line_rate_bps
        rows.append(row)
        emit(format_row(row, p))
    report = summary(p, comm, rows)
    report["intra_rate_bps"] = intra_rate
    report["intra_measured_bps"] = intra_measured
    report["nic_rx_drops"] = nic_rx_drops(comm)
    report["autotune"] = comm.autotune.choices() if comm.autotune.enabled else None
    for line in footer_lines(report):
        emit(line)
    return report


def summary(p: BenchParams, comm: Communicator, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON report: parameters, rows and totals (``drops``/``ecn_marks`` are filled by whoever owns a fabric)."""
    last = rows[-1] if rows else {}
    avg_busbw = sum(r["busbw_bps"] for r in rows) / len(rows) if rows else 0.0
    return {
        "op": p.op, "dtype": p.dtype, "redop": p.redop if p.op in REDUCTIONS else "none",
        "root": p.root if p.op in ROOTED else -1, "algo": p.algo or "auto",
        "world_size": comm.world_size, "servers": len(set(comm.layout.server_of)), "iters": p.iters,
        "warmup": p.warmup, "check": p.check,
        "line_rate_bps": p.line_rate_bps, "drops": None, "ecn_marks": None,
        "avg_busbw_bps": avg_busbw, "max_size_bytes": last.get("size_bytes", 0),
        "max_size_busbw_bps": last.get("busbw_bps", 0.0),
        "max_size_busbw_frac_line": last.get("busbw_frac_line"),
        "max_size_nic_bps": last.get("nic_bps", 0.0), "max_size_nic_frac_line": last.get("nic_frac_line"),
        "wrong": sum(max(r["wrong"], 0) for r in rows), "results": rows,
    }


# --- text output ----------------------------------------------------------------------------------------------
def _gbytes(bps: float) -> str:
    """bit/s as nccl-tests' GB/s (1e9 bytes/s), with enough digits for emulated Mb/s links."""
    v = bps / 8e9
    return f"{v:7.2f}" if v >= 1 else f"{v:7.4f}"


def header_lines(p: BenchParams, comm: Communicator) -> list[str]:
    servers = len(set(comm.layout.server_of))
    line = f"line rate {p.line_rate_bps / 1e6:g} Mb/s per rail" if p.line_rate_bps else "line rate unknown"
    head = (f"{'size':>12} {'count':>12} {'type':>8} {'redop':>6} {'root':>5}"
            + f" {'time':>9} {'algbw':>7} {'busbw':>7} {'#wrong':>6}" * 2 + f" {'busbw/':>7}")
    units = (f"{'(B)':>12} {'(elements)':>12} {'':>8} {'':>6} {'':>5}"
             + f" {'(us)':>9} {'(GB/s)':>7} {'(GB/s)':>7} {'':>6}" * 2 + f" {'line':>7}")
    return [f"# starpulse bench {p.op}: {comm.world_size} ranks on {servers} servers, {line}, "
            f"iters {p.iters}, warmup {p.warmup}, check {int(p.check)}, algo {p.algo or 'auto'}",
            "#" + " " * 46 + f"{'out-of-place':^34} {'in-place':^34}", "#" + head[1:], "#" + units[1:]]


def format_row(row: dict[str, Any], p: BenchParams) -> str:
    def part(m: dict[str, Any]) -> str:
        wrong = "N/A" if m["wrong"] < 0 else str(m["wrong"])
        return f" {m['time_us']:9.1f} {_gbytes(m['algbw_bps'])} {_gbytes(m['busbw_bps'])} {wrong:>6}"

    frac = f" {row['busbw_frac_line']:7.3f}" if "busbw_frac_line" in row else f" {'-':>7}"
    return (f"{row['size_bytes']:>13} {row['count']:>12} {row['type']:>8} {row['redop']:>6} {row['root']:>5}"
            + part(row["out_of_place"]) + part(row["in_place"]) + frac)


def footer_lines(report: dict[str, Any]) -> list[str]:
    out = [f"# Out of bounds values : {report['wrong']} {'OK' if report['wrong'] == 0 else 'FAILED'}"
           if report["check"] else "# Out of bounds values : not checked (-c 0)",
           f"# Avg bus bandwidth    : {_gbytes(report['avg_busbw_bps']).strip()} GB/s"]
    if report["line_rate_bps"]:
        frac = report["max_size_busbw_frac_line"] or 0.0
        out.append(f"# busbw at {report['max_size_bytes']} B: {report['max_size_busbw_bps'] / 1e6:.1f} Mb/s = "
                   f"{frac:.3f} of the {report['line_rate_bps'] / 1e6:g} Mb/s per-rail line rate")
        if report["max_size_nic_bps"]:
            out.append(f"# busiest NIC at {report['max_size_bytes']} B: {report['max_size_nic_bps'] / 1e6:.1f} Mb/s "
                       f"of payload = {report['max_size_nic_frac_line'] or 0.0:.3f} of line rate (hierarchical and "
                       "rail-aligned algorithms keep part of busbw inside the server)")
    out += choice_lines(report.get("autotune"))
    if report.get("nic_rx_drops"):
        out.append("# NIC frames dropped unparsed: " + ", ".join(f"{r} {n}" for r, n in report["nic_rx_drops"].items()))
    return out
