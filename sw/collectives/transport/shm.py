"""Intra-server transport standing in for NVLink: one single-producer/single-consumer ring per directed pair.

Rings are files in /dev/shm mapped by both ranks (network namespaces share it).  The receiver creates its
incoming rings; once every peer has mapped them the files are unlinked, so a crash never leaks a segment.
Each rank's egress is throttled to ``rate_bps`` (one NVLink port's worth), measured on ``sw.clock``.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import numpy as np

from sw.clock import Clock

from ..errors import PeerGoneError
from .base import StreamChannel, ThrottledChannelTransport
from .throttle import Throttle

SHM_DIR = Path("/dev/shm")
_CTRL_BYTES = 128  # head at 0 and writer-closed at 8; tail at 64 and reader-closed at 72 (two cache lines)
_LIVENESS_EVERY = 2048  # empty reads between checks that a silent peer process still exists


def ring_path(job: str, src: int, dst: int) -> Path:
    return SHM_DIR / f"spcoll-{job}-{src}to{dst}"


class Ring:
    """A byte ring of ``capacity`` bytes in a mapped file; head/tail are free-running 64-bit counters."""

    def __init__(self, path: Path, capacity: int, create: bool) -> None:
        self.path = path
        size = _CTRL_BYTES + capacity
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            elif os.fstat(fd).st_size != size:
                raise ValueError(f"shared-memory ring {path} has size {os.fstat(fd).st_size}, expected {size}")
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.capacity = capacity
        self._head = np.frombuffer(self._mm, dtype=np.uint64, count=1, offset=0)
        self._tail = np.frombuffer(self._mm, dtype=np.uint64, count=1, offset=64)
        self._writer_closed = np.frombuffer(self._mm, dtype=np.uint64, count=1, offset=8)
        self._reader_closed = np.frombuffer(self._mm, dtype=np.uint64, count=1, offset=72)
        self._data = np.frombuffer(self._mm, dtype=np.uint8, count=capacity, offset=_CTRL_BYTES)

    def free(self) -> int:
        """Bytes the writer may add now."""
        return self.capacity - (int(self._head[0]) - int(self._tail[0]))

    def write(self, view: memoryview, limit: int) -> int:
        head, tail = int(self._head[0]), int(self._tail[0])
        n = min(len(view), self.capacity - (head - tail), limit)
        if n <= 0:
            return 0
        src = np.frombuffer(view, dtype=np.uint8, count=n)
        pos = head % self.capacity
        first = min(n, self.capacity - pos)
        self._data[pos:pos + first] = src[:first]
        if first < n:
            self._data[:n - first] = src[first:]
        self._head[0] = head + n  # publish after the data (x86 keeps store order)
        return n

    def read(self, view: memoryview) -> int:
        head, tail = int(self._head[0]), int(self._tail[0])
        n = min(len(view), head - tail)
        if n <= 0:
            return 0
        dst = np.frombuffer(view, dtype=np.uint8, count=n)
        pos = tail % self.capacity
        first = min(n, self.capacity - pos)
        dst[:first] = self._data[pos:pos + first]
        if first < n:
            dst[first:] = self._data[:n - first]
        self._tail[0] = tail + n
        return n

    @property
    def writer_closed(self) -> bool:
        return bool(self._writer_closed[0])

    @property
    def reader_closed(self) -> bool:
        return bool(self._reader_closed[0])

    def close(self, *, as_writer: bool) -> None:
        """Tell the other end we are gone (it fails fast instead of timing out), then unmap."""
        (self._writer_closed if as_writer else self._reader_closed)[0] = 1
        del self._head, self._tail, self._data, self._writer_closed, self._reader_closed
        self._mm.close()


def process_gone(pid: int) -> bool:
    """True if ``pid`` no longer runs (absent or a zombie); ranks of a server share the PID namespace."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


class ShmChannel(StreamChannel):
    """Both directions to one local peer: our outgoing ring (their incoming) and our incoming ring."""

    def __init__(self, my_rank: int, peer: int, tx: Ring, rx: Ring, throttle: Throttle | None,
                 peer_pid: int | None = None) -> None:
        super().__init__(my_rank, peer)
        self.tx, self.rx, self.throttle = tx, rx, throttle
        self.peer_pid = peer_pid
        self._empty_reads = 0

    def _gone(self, how: str) -> PeerGoneError:
        return PeerGoneError(f"rank {self.my_rank}: local rank {self.peer} {how}")

    def _write(self, view: memoryview) -> int:
        if self.tx.reader_closed:
            raise self._gone("closed its shared-memory ring (exited)")
        limit = min(len(view), self.tx.free())
        if self.throttle is not None and limit > 0:
            limit = self.throttle.grant(limit)
        return self.tx.write(view, limit)

    def _read(self, view: memoryview) -> int:
        n = self.rx.read(view)
        if n or not self._expecting():
            return n
        if self.rx.writer_closed or self.tx.reader_closed:
            raise self._gone("closed its shared-memory ring (exited)")
        self._empty_reads += 1
        if self.peer_pid is not None and self._empty_reads % _LIVENESS_EVERY == 0 and process_gone(self.peer_pid):
            raise self._gone(f"(pid {self.peer_pid}) died")
        return 0


class ShmTransport(ThrottledChannelTransport):
    """Shared-memory channels to the other ranks of this server, egress throttled to ``rate_bps`` if given."""

    name = "shm"

    @classmethod
    def create_incoming(cls, job: str, my_rank: int, local_peers: list[int], capacity: int) -> dict[int, Ring]:
        """Step 1 of set-up: create the rings peers will write to us through."""
        return {p: Ring(ring_path(job, p, my_rank), capacity, create=True) for p in local_peers}

    @classmethod
    def attach(cls, job: str, my_rank: int, incoming: dict[int, Ring], capacity: int,
               rate_bps: float | None, clock: Clock | None = None, pids: dict[int, int] | None = None
               ) -> ShmTransport:
        """Step 2 (after every peer did step 1): map the peers' incoming rings as our outgoing ones."""
        throttle = Throttle(rate_bps, clock=clock) if rate_bps else None
        channels = {}
        for p, rx in incoming.items():
            tx = Ring(ring_path(job, my_rank, p), capacity, create=False)
            channels[p] = ShmChannel(my_rank, p, tx, rx, throttle, (pids or {}).get(p))
        return cls(my_rank, channels, throttle)

    @staticmethod
    def unlink_incoming(incoming: dict[int, Ring]) -> None:
        """Step 3 (after every peer did step 2): remove the files; the mappings live on."""
        for ring in incoming.values():
            ring.path.unlink(missing_ok=True)


    def progress(self) -> bool:
        return self._progress_channels()

    def close(self) -> None:
        for ch in self.channels.values():
            ch.tx.close(as_writer=True)
            ch.rx.close(as_writer=False)
        self.channels = {}
