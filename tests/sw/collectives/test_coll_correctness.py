"""Every collective and every algorithm against numpy, on real processes (shm inside a server, TCP between).

Integers must match bitwise (wrap-around sum/prod are exact in any order).  min/max must match bitwise for
every type.  Floating sum/avg/prod depend on the reduction order; each step rounds to the buffer's type, so the
error bound used is ``n * eps * sum(|x_i|)`` for sum (divided by n for avg, plus one rounding of the result)
and ``n * eps * |prod|`` for prod, with eps of the buffer's type (2**-7 for bfloat16).  All ranks must hold
bitwise identical results.
"""

from __future__ import annotations

import numpy as np
import pytest

from sw.collectives import bf16_to_f32, f32_to_bf16
from sw.collectives.local import run_local

pytestmark = pytest.mark.unit

DTYPES = ("float32", "float16", "int32", "int64", "bfloat16")
OPS = ("sum", "prod", "min", "max", "avg")
EPS = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def make(dtype: str, count: int, seed: tuple[int, ...], op: str = "sum") -> np.ndarray:
    rng = np.random.default_rng(list(seed))
    if dtype in ("int32", "int64"):
        lo, hi = (-5, 6) if op == "prod" else (-(2**30), 2**30)
        return rng.integers(lo, hi, count).astype(dtype)
    values = rng.uniform(0.5, 1.5, count) if op == "prod" else rng.uniform(-2, 2, count)
    if dtype == "bfloat16":
        return f32_to_bf16(values.astype(np.float32))
    return values.astype(dtype)


def as_f64(x: np.ndarray, dtype: str) -> np.ndarray:
    return bf16_to_f32(x).astype(np.float64) if dtype == "bfloat16" else x.astype(np.float64)


def reference(inputs: list[np.ndarray], op: str, dtype: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(expected, tolerance or None for bitwise) of reducing ``inputs`` elementwise."""
    stack = np.stack(inputs)
    n = len(inputs)
    if dtype in ("int32", "int64"):
        if op in ("sum", "prod"):
            return (np.sum if op == "sum" else np.prod)(stack, axis=0, dtype=dtype), None
        return (np.min if op == "min" else np.max)(stack, axis=0), None
    if op in ("min", "max"):
        pick = np.min if op == "min" else np.max
        if dtype == "bfloat16":
            return f32_to_bf16(pick(bf16_to_f32(stack), axis=0)), None
        return pick(stack, axis=0), None
    f = np.stack([as_f64(x, dtype) for x in inputs])
    eps = EPS[dtype]
    if op == "prod":
        exact = np.prod(f, axis=0)
        return exact, n * eps * np.abs(exact)
    exact = f.sum(axis=0)
    tol = n * eps * np.abs(f).sum(axis=0)
    if op == "avg":
        exact, tol = exact / n, tol / n + eps * np.abs(exact / n)
    return exact, tol


def compare(got: np.ndarray, ref: tuple[np.ndarray, np.ndarray | None], dtype: str, what: str) -> list[str]:
    expected, tol = ref
    if tol is None:
        if dtype == "bfloat16" and expected.dtype != np.uint16:
            expected = expected.astype(np.uint16)
        ok = np.array_equal(got.view(np.uint8), np.ascontiguousarray(expected).astype(got.dtype).view(np.uint8))
        return [] if ok else [f"{what}: not bitwise equal (first diff at {np.flatnonzero(got != expected)[:3]})"]
    err = np.abs(as_f64(got, dtype) - expected)
    bad = np.flatnonzero(err > tol)
    return [f"{what}: {bad.size} elements beyond tolerance, e.g. got {got[bad[:2]]} want {expected[bad[:2]]}"] \
        if bad.size else []


def check_everything(comm, sizes: tuple[int, ...]) -> tuple[list[str], list[bytes]]:
    """Runs on every rank: all collectives x algorithms x dtypes x ops x in/out-of-place; returns failures and
    digests of every result (compared across ranks by the test)."""
    n, me = comm.world_size, comm.rank
    fails: list[str] = []
    digests: list[bytes] = []
    avail = {c: comm.tuner.available(c) for c in ("allreduce", "broadcast", "reduce", "allgather",
                                                  "reducescatter", "alltoall")}
    case = 0

    def inputs(dtype: str, count: int, op: str = "sum") -> list[np.ndarray]:
        return [make(dtype, count, (case, r), op) for r in range(n)]

    for count in sizes:
        chunk = 64 if count > 100 else None  # small chunks: many pipeline stages
        for algo in avail["allreduce"]:
            for dtype in DTYPES:
                for op in OPS:
                    if op == "avg" and dtype in ("int32", "int64"):
                        continue
                    case += 1
                    ins = inputs(dtype, count, op)
                    ref = reference(ins, op, dtype)
                    for inplace in (True, False):
                        x = ins[me].copy()
                        if inplace:
                            comm.allreduce(x, op=op, algo=algo, chunk_bytes=chunk)
                            got = x
                        else:
                            got = np.full_like(x, 7)
                            comm.allreduce(x, got, op=op, algo=algo, chunk_bytes=chunk)
                            if not np.array_equal(x, ins[me]):
                                fails.append(f"allreduce {algo} changed its sendbuf")
                        fails += compare(got, ref, dtype, f"allreduce {algo} {dtype} {op} n={count} inplace={inplace}")
                        digests.append(got.tobytes())
        for algo in avail["broadcast"]:
            for dtype in ("float32", "int64", "bfloat16"):
                case += 1
                root = case % n
                ins = inputs(dtype, count)
                x = ins[me].copy()
                comm.broadcast(x, root=root, algo=algo, chunk_bytes=chunk)
                fails += compare(x, (ins[root], None), dtype, f"broadcast {algo} {dtype} root={root}")
        for algo in avail["reduce"]:
            for dtype, op in (("int32", "sum"), ("float32", "sum"), ("float16", "max"), ("bfloat16", "avg"),
                              ("int64", "prod")):
                case += 1
                root = (case * 7) % n
                ins = inputs(dtype, count, op)
                x = ins[me].copy()
                out = np.zeros_like(x)
                comm.reduce(x, out, op=op, root=root, algo=algo, chunk_bytes=chunk)
                if me == root:
                    fails += compare(out, reference(ins, op, dtype), dtype, f"reduce {algo} {dtype} {op} root={root}")
                if not np.array_equal(x, ins[me]):
                    fails.append(f"reduce {algo}: sendbuf modified on rank {me}")
        for algo in avail["allgather"]:
            for dtype in ("float16", "int32", "bfloat16"):
                case += 1
                ins = inputs(dtype, count)
                want = np.concatenate(ins)
                got = comm.allgather(ins[me].copy(), algo=algo, chunk_bytes=chunk)
                fails += compare(got, (want, None), dtype, f"allgather {algo} {dtype}")
                buf = np.zeros(n * count, dtype=ins[me].dtype)
                buf[me * count:(me + 1) * count] = ins[me]
                comm.allgather(buf[me * count:(me + 1) * count], buf, algo=algo, chunk_bytes=chunk)
                fails += compare(buf, (want, None), dtype, f"allgather {algo} {dtype} in-place")
        for algo in avail["reducescatter"]:
            for dtype, op in (("int64", "sum"), ("float32", "sum"), ("bfloat16", "sum"), ("float16", "min"),
                              ("float32", "avg")):
                case += 1
                ins = inputs(dtype, n * count, op)
                exact, tol = reference(ins, op, dtype)
                part = slice(me * count, (me + 1) * count)
                ref = (exact[part], None if tol is None else tol[part])
                got = comm.reducescatter(ins[me].copy(), op=op, algo=algo, chunk_bytes=chunk)
                fails += compare(got, ref, dtype, f"reducescatter {algo} {dtype} {op}")
                buf = ins[me].copy()
                comm.reducescatter(buf, buf[part], op=op, algo=algo, chunk_bytes=chunk)
                fails += compare(buf[part], ref, dtype, f"reducescatter {algo} {dtype} {op} in-place")
        for algo in avail["alltoall"]:
            for dtype in ("int32", "float32"):
                case += 1
                ins = inputs(dtype, n * count)
                want = np.concatenate([ins[src][me * count:(me + 1) * count] for src in range(n)])
                got = np.zeros_like(ins[me])
                comm.alltoall(ins[me], got, algo=algo)
                fails += compare(got, (want, None), dtype, f"alltoall {algo} {dtype}")
                buf = ins[me].copy()
                comm.alltoall(buf, algo=algo)
                fails += compare(buf, (want, None), dtype, f"alltoall {algo} {dtype} in-place")
    comm.barrier()
    return fails, digests


LAYOUTS = [(1, 1), (1, 3), (3, 1), (2, 2), (3, 2), (2, (2, 1))]


@pytest.mark.parametrize("servers,gpus", LAYOUTS, ids=["1x1", "1x3", "3x1", "2x2", "3x2", "uneven-2+1"])
def test_every_collective_and_algorithm_matches_numpy(servers: int, gpus) -> None:
    sizes = (1, 7, 301) if gpus != 1 or servers > 1 else (0, 1, 301)
    results = run_local(servers, gpus, check_everything, sizes, timeout_s=240)
    for rank, (fails, _) in enumerate(results):
        assert not fails, f"rank {rank}:\n" + "\n".join(fails[:20])
    digests = [d for _, d in results]
    assert all(d == digests[0] for d in digests), "ranks hold different allreduce results"
    assert len(digests[0]) > 0


def random_calls(comm, seed: int, calls: int) -> list[str]:
    """The same seeded sequence of random calls on every rank: collective, algorithm, dtype, op, count
    (including counts below the world size) and chunk size (down to one element)."""
    n, me = comm.world_size, comm.rank
    rng = np.random.default_rng(seed)
    fails: list[str] = []
    for call in range(calls):
        coll = str(rng.choice(["allreduce", "reducescatter", "allgather", "broadcast", "reduce"]))
        algo = str(rng.choice(comm.tuner.available(coll)))
        dtype = str(rng.choice(DTYPES))
        ops = [o for o in OPS if not (o == "avg" and dtype.startswith("int"))]
        op = str(rng.choice(ops))
        count = int(rng.choice([1, 2, n - 1 or 1, n + 1, int(rng.integers(1, 3000))]))
        chunk_bytes = int(rng.choice([1, 2, 8, 100, 4096, 1 << 20]))
        root = int(rng.integers(0, n))
        ins = [make(dtype, count * (n if coll == "reducescatter" else 1), (seed, call, r), op) for r in range(n)]
        what = f"#{call} {coll} {algo} {dtype} {op} count={count} chunk={chunk_bytes}"
        if coll == "allreduce":
            fails += compare(comm.allreduce(ins[me].copy(), op=op, algo=algo, chunk_bytes=chunk_bytes),
                             reference(ins, op, dtype), dtype, what)
        elif coll == "reducescatter":
            exact, tol = reference(ins, op, dtype)
            part = slice(me * count, (me + 1) * count)
            got = comm.reducescatter(ins[me], op=op, algo=algo, chunk_bytes=chunk_bytes)
            fails += compare(got, (exact[part], None if tol is None else tol[part]), dtype, what)
        elif coll == "allgather":
            got = comm.allgather(ins[me], algo=algo, chunk_bytes=chunk_bytes)
            fails += compare(got, (np.concatenate(ins), None), dtype, what)
        elif coll == "broadcast":
            x = ins[me].copy()
            comm.broadcast(x, root=root, algo=algo, chunk_bytes=chunk_bytes)
            fails += compare(x, (ins[root], None), dtype, what + f" root={root}")
        else:
            out = np.zeros_like(ins[me])
            comm.reduce(ins[me], out, op=op, root=root, algo=algo, chunk_bytes=chunk_bytes)
            if me == root:
                fails += compare(out, reference(ins, op, dtype), dtype, what + f" root={root}")
    return fails


@pytest.mark.parametrize("servers,gpus,seed", [(3, 2, 1), (1, 5, 2), (2, 3, 3)])
def test_random_calls_with_random_counts_and_chunks(servers: int, gpus: int, seed: int) -> None:
    for rank, fails in enumerate(run_local(servers, gpus, random_calls, seed, 40, timeout_s=240)):
        assert not fails, f"rank {rank}:\n" + "\n".join(fails[:10])
