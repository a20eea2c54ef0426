"""The communicator: NCCL/torch.distributed-shaped collectives on numpy arrays, run in issue order on a
per-communicator worker (a stream), with async handles; algorithms come from the tuner or the caller.

Between operations the worker is the progress engine of user-space transports (RoCE: NCCL's proxy thread), so a
rank busy in its own code still acknowledges its peers' data, returns credits and sends its last frames; an error
it meets there is raised by the next operation."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .algorithms import alltoall as a2a
from .algorithms.hetero import hetero_allreduce
from .algorithms.hier import hier_allreduce
from .algorithms.rhd import rhd_allgather, rhd_allreduce, rhd_reducescatter
from .algorithms.ring import ring, ring_allreduce, ring_broadcast, ring_reduce
from .algorithms.tree import tree_allreduce, tree_broadcast, tree_reduce
from .autotune import AutoTuner
from .dtypes import DTYPE_CODES, OP_CODES, check_op, dtype_name, finish_avg, reducer
from .errors import CollectiveTimeoutError, CollectiveUserError, CommAbortedError
from .rank_layout import RankLayout
from .router import Net
from .tuner import ALGOS, Tuner

_KIND = {"allreduce": 1, "broadcast": 2, "reduce": 3, "allgather": 4, "reducescatter": 5, "alltoall": 6,
         "barrier": 7, "p2p": 8, "calibrate": 9}


class Work:
    """Handle of an operation issued with ``async_op=True``: ``wait()`` returns its result (the output array) or
    raises its error; ``is_completed()`` polls.  Operations of one communicator run one at a time in issue order
    (a stream), so waiting on the last handle also means every earlier one has finished.  ``what`` names the
    operation and the algorithm that runs it, e.g. ``'allgather(ring)'``.  ``start_ns``/``end_ns``: network time
    (``sw.clock``) the stream began and finished it (None until then), for timelines of overlapped work."""

    def __init__(self, comm: Communicator, what: str) -> None:
        self._comm = comm
        self.what = what
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self._event = threading.Event()
        self._error: BaseException | None = None
        self._result: Any = None

    def is_completed(self) -> bool:
        """True once the operation has finished (successfully or not); never blocks."""
        return self._event.is_set()

    def wait(self, timeout_s: float | None = None) -> Any:
        """Block until done (or ``timeout_s`` wall seconds); re-raise the operation's error here."""
        budget = timeout_s if timeout_s is not None else None
        waited = 0.0
        while not self._event.wait(0.2):
            waited += 0.2
            if budget is not None and waited >= budget:
                raise CollectiveTimeoutError(f"{self.what} did not complete within {timeout_s:g} s")
            if not self._comm._worker.is_alive():
                raise CommAbortedError(f"{self.what}: the communicator was closed before it ran")
        if self._error is not None:
            raise self._error
        return self._result


def _flat(buf: np.ndarray, what: str) -> np.ndarray:
    if not buf.flags.c_contiguous:
        raise CollectiveUserError(f"{what}: the array must be C-contiguous (use np.ascontiguousarray)")
    return buf.reshape(-1)


def _same_or_disjoint(src: np.ndarray, dst: np.ndarray, what: str) -> None:
    """In place (the very same memory) or out of place (no shared byte); a partial overlap is a user error."""
    if src.size and np.shares_memory(src, dst) and not (_addr(src) == _addr(dst) and src.nbytes == dst.nbytes):
        raise CollectiveUserError(f"{what}: recvbuf partially overlaps sendbuf (pass the same array for in place)")


def _addr(buf: np.ndarray) -> int:
    return int(buf.__array_interface__["data"][0])


class Communicator:
    """One rank's view of a group of ``world_size`` ranks laid out as servers x GPUs (rails); get one with
    ``init_from_env()`` (a launched rank) or ``init_communicator(...)``.

    Attributes: ``rank``, ``world_size``, ``local_rank`` (GPU = rail), ``server``, ``layout``, and
    ``last_choice`` (algorithm, chunk bytes) of the latest call.

    Collectives work on C-contiguous numpy arrays of float32, float16, int32, int64 or bfloat16 (uint16 bit
    patterns: ``f32_to_bf16``/``bf16_to_f32``); every rank must call the same collectives in the same order with
    the same sizes, dtypes, ops and roots.  Common arguments:

    - ``recvbuf``: the output array; omitted (None) means in place where the collective allows it.
    - ``op``: the reduction, one of ``REDUCE_OPS`` ('sum', 'prod', 'min', 'max', 'avg'; avg for float types).
    - ``algo``: the schedule for this call, one of ``self.algorithms(coll)`` (``ALGOS`` lists them all); else
      ``$STARPULSE_ALGO``, else the online auto-tune's choice when ``$STARPULSE_AUTOTUNE`` is on (``autotune``),
      else the tuner's.  ``chunk_bytes``: the pipeline chunk for this call.
    - ``async_op``: False (default) blocks and returns the output array; True returns a ``Work`` at once.

    Errors: a bad call raises ``CollectiveUserError`` at once and nothing runs (the communicator stays usable);
    ranks that disagree raise ``CollectiveMismatchError``; a dead or stuck peer raises ``PeerGoneError`` or
    ``CollectiveTimeoutError`` (after ``$STARPULSE_TIMEOUT`` s without progress); after any failure of a running
    operation every later call raises ``CommAbortedError``.  ``close()`` (or a ``with`` block) ends it.
    """

    def __init__(self, rank: int, layout: RankLayout, net: Net, tuner: Tuner,
                 closers: list[Callable[[], None]] | None = None) -> None:
        self.rank = rank
        self.layout = layout
        self.world_size = layout.world_size
        self.local_rank = layout.local_of[rank]
        self.server = layout.server_of[rank]
        self.net = net
        self.tuner = tuner
        self._clock = net.clock
        self._closers = closers or []
        self._seq = 0
        self._aborted: BaseException | None = None
        self._idle_error: BaseException | None = None  # met while progressing between operations, not yet raised
        self._queue: queue.Queue[tuple[Work, Callable[[], Any]] | None] = queue.Queue()
        self._engines = bool(net.host_progress())
        self._wake_r, self._wake_w = os.pipe() if self._engines else (-1, -1)
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.set_blocking(fd, False)
        self._worker = threading.Thread(target=self._run, name=f"coll-rank{rank}", daemon=True)
        self._worker.start()
        if self._engines:  # a user-space NIC dies with the process: deliver what we owe the peers before exit
            atexit.register(self.close)
        self.last_choice: tuple[str, int] | None = None
        self.autotune = AutoTuner(tuner, rank, tuner.env)
        self._running: Work | None = None

    # --- the stream -----------------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._next_item()
            if item is None:
                return
            work, fn = item
            work.start_ns = self._clock.now_ns()
            self._running = work
            try:
                if self._idle_error is not None:
                    err, self._idle_error = self._idle_error, None
                    raise err
                if self._aborted is not None:
                    raise CommAbortedError(f"{work.what}: communicator aborted earlier ({self._aborted})")
                work._result = fn()
            except BaseException as exc:  # handed to the waiter
                work._error = exc
                if self._aborted is None:  # the ranks' message streams are out of step now
                    self._aborted = exc
            finally:
                self._running = None
                work.end_ns = self._clock.now_ns()
                work._event.set()

    def _next_item(self) -> tuple[Work, Callable[[], Any]] | None:
        """The next queued operation; until there is one, progress the user-space transports (idle waits block
        on their sockets, timers and the wake pipe, never spin)."""
        while True:
            try:
                return self._queue.get_nowait()
            except queue.Empty:
                pass
            if not self._engines or self._aborted is not None:
                return self._queue.get()
            try:
                self.net.idle_progress(self._wake_r)
            except BaseException as exc:  # raised by the next operation
                self._aborted = self._idle_error = exc
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 4096)

    def _wake(self) -> None:
        """Interrupt the worker's idle wait (new work or close)."""
        if self._wake_w >= 0:
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake_w, b"w")

    def _submit(self, what: str, tag: int, fn: Callable[[], Any], async_op: bool) -> Any:
        if not self._worker.is_alive():
            raise CommAbortedError(f"{what}: the communicator is closed")
        work = Work(self, what)

        def tagged() -> Any:
            self.net.tag = tag
            return fn()
        self._queue.put((work, tagged))
        self._wake()
        return work if async_op else work.wait()

    def _tag(self, kind: str, dtype: str = "", op: str = "", root: int = 0) -> int:
        if kind == "p2p":
            seq = 0xFFFF_FFFF
        else:
            self._seq += 1
            seq = self._seq & 0x3FFF_FFFF   # bits 62-63 stay clear: LANE_BIT, p2p
        return (seq << 32) | (_KIND[kind] << 24) | (DTYPE_CODES.get(dtype, 0) << 16) | (OP_CODES.get(op, 0) << 8) \
            | (root & 0xFF)

    def _check_root(self, root: int) -> int:
        if isinstance(root, bool) or not isinstance(root, int | np.integer) or not 0 <= root < self.world_size:
            raise CollectiveUserError(f"root {root!r}: expected a rank in 0..{self.world_size - 1}")
        return int(root)

    def _check_peer(self, peer: int) -> int:
        if isinstance(peer, bool) or not isinstance(peer, int | np.integer) or not 0 <= peer < self.world_size:
            raise CollectiveUserError(f"peer {peer!r}: expected a rank in 0..{self.world_size - 1}")
        if peer == self.rank:
            raise CollectiveUserError(f"peer {peer}: a rank cannot send to or receive from itself")
        return int(peer)

    def _choose(self, coll: str, nbytes: int, algo: str | None, chunk_bytes: int | None, itemsize: int
                ) -> tuple[str, int]:
        name = self.tuner.algo(coll, nbytes, algo)
        if name not in self.tuner.available(coll):
            raise CollectiveUserError(f"algo {name!r}: cannot run {coll} on {self.world_size} ranks in this layout "
                                      f"(available: {', '.join(self.tuner.available(coll))})")
        chunk = self.tuner.chunk_bytes(coll, name, nbytes, chunk_bytes)
        self.last_choice = (name, chunk)
        return name, max(1, chunk // itemsize)

    def _plan(self, coll: str, nbytes: int, algo: str | None, chunk_bytes: int | None, itemsize: int
              ) -> tuple[str, int] | None:
        """(algorithm, chunk elements) fixed at issue, or None when the auto-tuner picks on the stream (no per-call
        algorithm, none in $STARPULSE_ALGO for ``coll``, more than one rank)."""
        if self.autotune.enabled and algo is None and coll not in self.tuner.env_algo and self.world_size > 1:
            self.tuner.chunk_bytes(coll, "ring", nbytes, chunk_bytes)   # a bad chunk_bytes fails at issue
            return None
        return self._choose(coll, nbytes, algo, chunk_bytes, itemsize)

    def _tuned(self, coll: str, nbytes: int, itemsize: int, chunk_bytes: int | None, plan: tuple[str, int] | None,
               what: Callable[[str], str], body: Callable[[str, int], Any]) -> Callable[[], Any]:
        """The stream's function of one collective: ``body(algorithm, chunk elements)`` with the planned choice,
        or with the auto-tuner's, timing it (maximum over ranks) when it is a probe."""
        def run() -> Any:
            if plan is not None:
                return body(*plan)
            self._share_table()
            name, chunk, probe = self.autotune.pick(coll, nbytes, chunk_bytes)
            self.last_choice = (name, chunk)
            if self._running is not None:
                self._running.what = what(name)
            start = self._clock.now_ns()
            out = body(name, max(1, chunk // itemsize))
            if probe:
                elapsed = np.full(self.world_size, self._clock.now_ns() - start, dtype=np.int64)
                ring_allreduce(self.net, list(range(self.world_size)), elapsed, reducer("max", "int64"),
                               self.world_size)
                self.autotune.record(coll, nbytes, name, chunk, float(elapsed[0]) / 1e9)
            return out
        return run

    def _share_table(self) -> None:
        """Once: broadcast rank 0's stored tuning table, so every rank starts from the same one."""
        if self.autotune.shared:
            return
        group = list(range(self.world_size))
        data = json.dumps(self.autotune.encode()).encode() if self.rank == 0 else b""
        length = np.full(1, len(data), dtype=np.int64)
        ring_broadcast(self.net, group, length, 0, 1)
        buf = np.frombuffer(data, np.uint8).copy() if self.rank == 0 else np.empty(int(length[0]), np.uint8)
        if buf.size:
            ring_broadcast(self.net, group, buf, 0, 1 << 20)
        self.autotune.table = AutoTuner.decode(json.loads(buf.tobytes()) if buf.size else {})
        self.autotune.shared = True

    @staticmethod
    def _out(send: np.ndarray, recv: np.ndarray | None, count: int, dtype: str, what: str) -> np.ndarray:
        if recv is None:
            return np.empty(count, dtype=send.dtype)
        if dtype_name(recv, what) != dtype:
            raise CollectiveUserError(f"{what}: dtype {recv.dtype.name} differs from the send buffer's "
                                      f"{send.dtype.name}")
        if recv.size != count:
            raise CollectiveUserError(f"{what}: has {recv.size} elements, expected {count}")
        return recv

    # --- collectives ----------------------------------------------------------------------------------------
    def allreduce(self, sendbuf: np.ndarray, recvbuf: np.ndarray | None = None, op: str = "sum", *,
                  algo: str | None = None, chunk_bytes: int | None = None, async_op: bool = False) -> Any:
        """Reduce ``sendbuf`` over all ranks into ``recvbuf`` (``sendbuf`` itself when omitted: in place)."""
        dtype = dtype_name(sendbuf, "allreduce sendbuf")
        check_op(op, dtype)
        recvbuf = sendbuf if recvbuf is None else self._out(sendbuf, recvbuf, sendbuf.size, dtype, "allreduce recvbuf")
        x, src = _flat(recvbuf, "allreduce recvbuf"), _flat(sendbuf, "allreduce sendbuf")
        _same_or_disjoint(src, x, "allreduce")
        plan = self._plan("allreduce", x.nbytes, algo, chunk_bytes, x.itemsize)
        red = reducer(op, dtype)

        def body(name: str, chunk: int) -> np.ndarray:
            if x is not src:
                x[...] = src
            if x.size:
                group = list(range(self.world_size))
                if name == "ring":
                    ring_allreduce(self.net, group, x, red, chunk)
                elif name == "tree":
                    tree_allreduce(self.net, group, x, red, chunk)
                elif name == "rhd":
                    rhd_allreduce(self.net, group, x, red)
                elif name == "hetero":
                    hier_elems = int(round(x.size * self.tuner.hetero_fraction(x.nbytes)))
                    hetero_allreduce(self.net, x, red, chunk, hier_elems)
                else:
                    hier_allreduce(self.net, x, red, chunk)
                if op == "avg":
                    finish_avg(x, dtype, self.world_size)
            return recvbuf
        what = lambda name: f"allreduce({op}, {name})"  # noqa: E731
        run = self._tuned("allreduce", x.nbytes, x.itemsize, chunk_bytes, plan, what, body)
        return self._submit(what(plan[0] if plan else "auto"), self._tag("allreduce", dtype, op), run, async_op)

    def broadcast(self, buf: np.ndarray, root: int = 0, *, algo: str | None = None, chunk_bytes: int | None = None,
                  async_op: bool = False) -> Any:
        """Copy ``buf`` of rank ``root`` into ``buf`` of every rank."""
        dtype = dtype_name(buf, "broadcast buf")
        root = self._check_root(root)
        x = _flat(buf, "broadcast buf")
        plan = self._plan("broadcast", x.nbytes, algo, chunk_bytes, x.itemsize)

        def body(name: str, chunk: int) -> np.ndarray:
            if x.size:
                fn = ring_broadcast if name == "ring" else tree_broadcast
                fn(self.net, list(range(self.world_size)), x, root, chunk)
            return buf
        what = lambda name: f"broadcast(root {root}, {name})"  # noqa: E731
        run = self._tuned("broadcast", x.nbytes, x.itemsize, chunk_bytes, plan, what, body)
        return self._submit(what(plan[0] if plan else "auto"), self._tag("broadcast", dtype, root=root), run,
                            async_op)

    def reduce(self, sendbuf: np.ndarray, recvbuf: np.ndarray | None = None, op: str = "sum", root: int = 0, *,
               algo: str | None = None, chunk_bytes: int | None = None, async_op: bool = False) -> Any:
        """Reduce into ``recvbuf`` on ``root`` only (``sendbuf`` when omitted); other ranks' buffers are kept."""
        dtype = dtype_name(sendbuf, "reduce sendbuf")
        check_op(op, dtype)
        root = self._check_root(root)
        out = sendbuf if recvbuf is None else self._out(sendbuf, recvbuf, sendbuf.size, dtype, "reduce recvbuf")
        src = _flat(sendbuf, "reduce sendbuf")
        dst = _flat(out, "reduce recvbuf")
        _same_or_disjoint(src, dst, "reduce")
        plan = self._plan("reduce", src.nbytes, algo, chunk_bytes, src.itemsize)
        red = reducer(op, dtype)

        def body(name: str, chunk: int) -> np.ndarray:
            is_root = self.rank == root
            x = dst if is_root else src.copy()
            if x is not src:
                x[...] = src
            if x.size:
                fn = ring_reduce if name == "ring" else tree_reduce
                fn(self.net, list(range(self.world_size)), x, root, red, chunk)
                if op == "avg" and is_root:
                    finish_avg(x, dtype, self.world_size)
            return out
        what = lambda name: f"reduce({op}, root {root}, {name})"  # noqa: E731
        run = self._tuned("reduce", src.nbytes, src.itemsize, chunk_bytes, plan, what, body)
        return self._submit(what(plan[0] if plan else "auto"), self._tag("reduce", dtype, op, root), run, async_op)

    def allgather(self, sendbuf: np.ndarray, recvbuf: np.ndarray | None = None, *, algo: str | None = None,
                  chunk_bytes: int | None = None, async_op: bool = False) -> Any:
        """Concatenate every rank's ``sendbuf`` in rank order into ``recvbuf`` (world_size x count elements).

        In place when ``sendbuf`` is this rank's slice of ``recvbuf`` (as in NCCL)."""
        dtype = dtype_name(sendbuf, "allgather sendbuf")
        n = self.world_size
        src = _flat(sendbuf, "allgather sendbuf")
        out = self._out(sendbuf, recvbuf, n * src.size, dtype, "allgather recvbuf")
        x = _flat(out, "allgather recvbuf")
        count = src.size
        inplace = count > 0 and _addr(src) == _addr(x) + self.rank * src.nbytes
        if count and not inplace and np.shares_memory(src, x):
            raise CollectiveUserError("allgather: sendbuf overlaps recvbuf but is not this rank's slice of it")
        plan = self._plan("allgather", x.nbytes, algo, chunk_bytes, x.itemsize)

        def body(name: str, chunk: int) -> np.ndarray:
            if not inplace:
                x[self.rank * count:(self.rank + 1) * count] = src
            if count:
                group = list(range(n))
                if name == "ring":
                    ring(self.net, group, x, chunk, None, rs=False, ag=True, off=-1)
                else:
                    rhd_allgather(self.net, group, x)
            return out
        what = lambda name: f"allgather({name})"  # noqa: E731
        run = self._tuned("allgather", x.nbytes, x.itemsize, chunk_bytes, plan, what, body)
        return self._submit(what(plan[0] if plan else "auto"), self._tag("allgather", dtype), run, async_op)

    def reducescatter(self, sendbuf: np.ndarray, recvbuf: np.ndarray | None = None, op: str = "sum", *,
                      algo: str | None = None, chunk_bytes: int | None = None, async_op: bool = False) -> Any:
        """Reduce ``sendbuf`` (world_size x count) over ranks; rank r gets block r in ``recvbuf`` (count).

        In place when ``recvbuf`` is this rank's slice of ``sendbuf``; ``sendbuf`` is never modified otherwise."""
        dtype = dtype_name(sendbuf, "reducescatter sendbuf")
        check_op(op, dtype)
        n = self.world_size
        src = _flat(sendbuf, "reducescatter sendbuf")
        if src.size % n:
            raise CollectiveUserError(f"reducescatter sendbuf: {src.size} elements is not a multiple of the "
                                      f"world size {n}")
        count = src.size // n
        out = self._out(sendbuf, recvbuf, count, dtype, "reducescatter recvbuf")
        y = _flat(out, "reducescatter recvbuf")
        plan = self._plan("reducescatter", src.nbytes, algo, chunk_bytes, src.itemsize)
        red = reducer(op, dtype)

        def body(name: str, chunk: int) -> np.ndarray:
            x = src.copy()
            if count:
                group = list(range(n))
                if name == "ring":
                    ring(self.net, group, x, chunk, red, rs=True, ag=False, off=-1)
                else:
                    rhd_reducescatter(self.net, group, x, red)
            y[...] = x[self.rank * count:(self.rank + 1) * count]
            if op == "avg":
                finish_avg(y, dtype, n)
            return out
        what = lambda name: f"reducescatter({op}, {name})"  # noqa: E731
        run = self._tuned("reducescatter", src.nbytes, src.itemsize, chunk_bytes, plan, what, body)
        return self._submit(what(plan[0] if plan else "auto"), self._tag("reducescatter", dtype, op), run, async_op)

    def alltoall(self, sendbuf: np.ndarray, recvbuf: np.ndarray | None = None, *, algo: str | None = None,
                 chunk_bytes: int | None = None, async_op: bool = False) -> Any:
        """Block j of ``sendbuf`` (world_size equal blocks) goes to rank j, landing as block ``rank`` there;
        blocks travel as pipeline chunks of the tuner's (or ``chunk_bytes``) size."""
        dtype = dtype_name(sendbuf, "alltoall sendbuf")
        n = self.world_size
        src = _flat(sendbuf, "alltoall sendbuf")
        if src.size % n:
            raise CollectiveUserError(f"alltoall sendbuf: {src.size} elements is not a multiple of the world size {n}")
        out = sendbuf if recvbuf is None else self._out(sendbuf, recvbuf, src.size, dtype, "alltoall recvbuf")
        y = _flat(out, "alltoall recvbuf")
        plan = self._plan("alltoall", src.nbytes, algo, chunk_bytes, src.itemsize)

        def body(name: str, chunk: int) -> np.ndarray:
            send = src.copy() if np.shares_memory(src, y) else src
            if src.size:
                if name == "pairwise":
                    a2a.pairwise_alltoall(self.net, send, y, chunk)
                else:
                    a2a.rail_alltoall(self.net, send, y, chunk=chunk)
            return out
        what = lambda name: f"alltoall({name})"  # noqa: E731
        run = self._tuned("alltoall", src.nbytes, src.itemsize, chunk_bytes, plan, what, body)
        return self._submit(what(plan[0] if plan else "auto"), self._tag("alltoall", dtype), run, async_op)

    def send(self, buf: np.ndarray, peer: int, *, async_op: bool = False) -> Any:
        """Send ``buf`` to ``peer`` (matched by that rank's next ``recv`` from us)."""
        dtype = dtype_name(buf, "send buf")
        x = _flat(buf, "send buf")
        peer = self._check_peer(peer)
        return self._submit(f"send(to {peer})", self._tag("p2p", dtype),
                            lambda: self.net.waitall([self.net.isend(peer, x)]), async_op)

    def recv(self, buf: np.ndarray, peer: int, *, async_op: bool = False) -> Any:
        """Receive the next message from ``peer`` into ``buf`` (sizes and dtypes must match the send)."""
        dtype = dtype_name(buf, "recv buf")
        x = _flat(buf, "recv buf")
        peer = self._check_peer(peer)

        def run() -> np.ndarray:
            self.net.wait(self.net.irecv(peer, x))
            return buf
        return self._submit(f"recv(from {peer})", self._tag("p2p", dtype), run, async_op)

    def barrier(self, *, async_op: bool = False) -> Any:
        """Return only once every rank has entered the barrier (dissemination: ceil(log2 n) rounds)."""
        def run() -> None:
            n, p, k = self.world_size, self.rank, 1
            token, sink = np.zeros(0, np.uint8), np.zeros(0, np.uint8)
            while k < n:
                self.net.waitall([self.net.irecv((p - k) % n, sink), self.net.isend((p + k) % n, token)])
                k *= 2
        return self._submit("barrier", self._tag("barrier"), run, async_op)

    # --- bookkeeping ----------------------------------------------------------------------------------------
    def algorithms(self, coll: str) -> tuple[str, ...]:
        """The ``algo=`` names ``coll`` ('allreduce', 'alltoall', ...) can run with on this job's layout."""
        if coll not in ALGOS:
            raise CollectiveUserError(f"collective {coll!r}: unknown (allowed: {', '.join(ALGOS)})")
        return self.tuner.available(coll)

    def counters(self) -> dict[str, int]:
        """Payload bytes this rank sent per link class (intra, rail, cross) since start or reset."""
        return dict(self.net.bytes_sent)

    def message_counters(self) -> dict[str, int]:
        """Messages (pipeline chunks included) this rank sent per link class since start or reset."""
        return dict(self.net.messages_sent)

    def reset_counters(self) -> None:
        """Zero the byte and message counters."""
        for d in (self.net.bytes_sent, self.net.messages_sent):
            for k in d:
                d[k] = 0

    def close(self) -> None:
        """Finish queued work, stop the worker and release transports (idempotent; also run at exit)."""
        atexit.unregister(self.close)
        if self._worker.is_alive():
            self._queue.put(None)
            self._wake()
            self._worker.join(timeout=self.net.timeout_s + 5)
        if not self._worker.is_alive():
            for fd in (self._wake_r, self._wake_w):
                if fd >= 0:
                    os.close(fd)
            self._wake_r = self._wake_w = -1
        for close in self._closers:
            close()
        self._closers = []

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
