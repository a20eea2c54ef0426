"""Transport contract: posted sends/receives of numpy buffers to/from a peer, with completion handles.

Kept to what an RC queue pair provides: a send or receive is posted with a buffer that must stay untouched
until its request completes; messages between two ranks arrive in posting order; a receive matches the next
message from that peer.  Every message carries a 16-byte header (tag, length) so ranks that disagree on the
collective, size or dtype fail with a clear error instead of corrupting data.

How an RC QP (``sw.roce``) fits: ``isend`` is a signalled SEND (header + payload, or the payload as an RDMA
WRITE with immediate into a peer-registered slot), ``irecv`` a posted receive into a registered bounce or user
buffer, and a request is done when its completion is polled from the CQ; ``progress`` polls the CQs.  Eager
buffering of early messages maps to a pool of pre-posted receive buffers.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Protocol

import numpy as np

from ..errors import CollectiveMismatchError
from .throttle import WAKE_BYTES, Throttle

HEADER = struct.Struct("<QQ")
"""Message header: tag (operation sequence, kind, dtype) and payload length in bytes."""
LANE_BIT = 1 << 62
"""Tag bit of the second lane: a collective that runs two schedules at once (``hetero`` allreduce) tags one of
them with it; receives match messages in order within a lane, so the two may interleave on one channel."""


def lane_of(tag: int) -> int:
    """The lane (0 or 1) of a message tag: 1 when ``LANE_BIT`` is set and the top bit (point-to-point) is not."""
    return 1 if tag & LANE_BIT and not tag >> 63 else 0


def byte_view(buf: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous numpy array as a writable-if-possible flat memoryview."""
    return memoryview(buf).cast("B") if buf.ndim else memoryview(buf.reshape(1)).cast("B")


class Request:
    """One posted send or receive; ``done`` once the bytes left or landed; ``error`` if the channel failed."""

    __slots__ = ("peer", "tag", "view", "nbytes", "done", "error", "kind")

    def __init__(self, kind: str, peer: int, tag: int, view: memoryview) -> None:
        self.kind = kind
        self.peer = peer
        self.tag = tag
        self.view = view
        self.nbytes = len(view)
        self.done = False
        self.error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<{self.kind} peer={self.peer} tag={self.tag:#x} bytes={self.nbytes} done={self.done}>"


class Transport(Protocol):
    """What the router needs from a transport (shared memory, TCP, RoCE RC QPs)."""

    name: str
    host_progress: bool
    """True when bytes only move while this process drives the transport (a user-space NIC: ACKs, credit
    writes, paced frames): the communicator then progresses it between operations too, as NCCL's proxy thread."""

    def peers(self) -> list[int]:
        """Global ranks this transport reaches."""
        ...

    def isend(self, peer: int, tag: int, view: memoryview) -> Request:
        """Post a send of ``view`` to ``peer``; the buffer must not change until the request is done."""
        ...

    def irecv(self, peer: int, tag: int, view: memoryview) -> Request:
        """Post a receive of exactly ``len(view)`` bytes from ``peer`` into ``view``."""
        ...

    def progress(self) -> bool:
        """Move bytes on every channel without blocking; True if anything moved."""
        ...

    def wake_hint_ns(self) -> float | None:
        """Network ns until a rate limiter lets more bytes go (None: nothing to wait for but the peers)."""
        ...

    def readable_fds(self) -> list[int]:
        """File descriptors that turn readable when a peer's bytes arrive (an idle wait selects on them)."""
        ...

    def close(self) -> None:
        ...


class ChannelTransport:
    """Posting half shared by every transport: one ``StreamChannel`` per peer in ``self.channels``."""

    channels: dict[int, StreamChannel]
    host_progress = False

    def readable_fds(self) -> list[int]:
        return []

    def peers(self) -> list[int]:
        return list(self.channels)

    def isend(self, peer: int, tag: int, view: memoryview) -> Request:
        req = Request("send", peer, tag, view)
        self.channels[peer].post_send(req)
        return req

    def irecv(self, peer: int, tag: int, view: memoryview) -> Request:
        req = Request("recv", peer, tag, view)
        self.channels[peer].post_recv(req)
        return req

    def _progress_channels(self) -> bool:
        moved = False
        for ch in self.channels.values():
            moved |= ch.progress()
        return moved


class ThrottledChannelTransport(ChannelTransport):
    """A channel transport whose egress may be held to a rate by one shared ``Throttle`` (shm, tcp)."""

    def __init__(self, my_rank: int, channels: dict[int, StreamChannel], throttle: Throttle | None = None) -> None:
        self.my_rank = my_rank
        self.channels = channels
        self.throttle = throttle

    def _progress_channels(self) -> bool:
        """Progress every channel; then tell the throttle whether sends wait (only a backlog banks a burst)."""
        moved = super()._progress_channels()
        if self.throttle is not None:
            self.throttle.backlogged = any(ch._sendq for ch in self.channels.values())
        return moved

    def wake_hint_ns(self) -> float | None:
        """When throttled with sends queued: network ns until a useful amount of tokens is back."""
        if self.throttle is None or not any(ch._sendq for ch in self.channels.values()):
            return None
        return self.throttle.ready_in_ns(WAKE_BYTES)


class StreamChannel:
    """Frames messages over one reliable byte stream to a peer and matches receives in posting order.

    Subclasses provide ``_write(view) -> int`` and ``_read(view) -> int`` (0 when they would block).  Messages
    that arrive before their receive is posted are kept (eager buffering), so no schedule can deadlock on a
    full stream.
    """

    def __init__(self, my_rank: int, peer: int) -> None:
        self.my_rank = my_rank
        self.peer = peer
        self._sendq: deque[Request] = deque()
        self._send_hdr = memoryview(b"")
        self._send_off = 0
        self._recvqs: tuple[deque[Request], deque[Request]] = (deque(), deque())
        self._unexpected: tuple[deque[tuple[int, bytearray]], ...] = (deque(), deque())
        self._hdr = bytearray(HEADER.size)
        self._hdr_got = 0
        self._target: memoryview | None = None
        self._target_got = 0
        self._target_req: Request | None = None
        self._target_buf: bytearray | None = None
        self._target_tag = 0

    def _write(self, view: memoryview) -> int:
        raise NotImplementedError

    def _read(self, view: memoryview) -> int:
        raise NotImplementedError

    # --- posting ---------------------------------------------------------------------------------------------
    def post_send(self, req: Request) -> None:
        if not self._sendq:
            self._send_hdr = memoryview(HEADER.pack(req.tag, req.nbytes))
            self._send_off = 0
        self._sendq.append(req)

    def post_recv(self, req: Request) -> None:
        lane = lane_of(req.tag)
        if self._unexpected[lane]:
            tag, data = self._unexpected[lane].popleft()
            self._match(req, tag, len(data))
            req.view[:] = data
            req.done = True
        else:
            self._recvqs[lane].append(req)

    def _recv_posted(self) -> bool:
        """True while a receive is posted on either lane."""
        return bool(self._recvqs[0] or self._recvqs[1])

    def busy(self) -> bool:
        return bool(self._sendq) or self._recv_posted()

    def _expecting(self) -> bool:
        """A receive is posted or a message is half read: silence from the peer now matters."""
        return self._recv_posted() or self._target is not None or self._hdr_got > 0

    # --- progress --------------------------------------------------------------------------------------------
    def progress(self) -> bool:
        return self._progress_tx() | self._progress_rx()

    def _progress_tx(self) -> bool:
        moved = False
        while self._sendq:
            req = self._sendq[0]
            hdr_len = len(self._send_hdr)
            if self._send_off < hdr_len:
                n = self._write(self._send_hdr[self._send_off:])
                self._send_off += n
                moved |= n > 0
                if self._send_off < hdr_len:
                    return moved
            off = self._send_off - hdr_len
            if off < req.nbytes:
                n = self._write(req.view[off:])
                self._send_off += n
                moved |= n > 0
                if self._send_off - hdr_len < req.nbytes:
                    return moved
            req.done = True
            self._sendq.popleft()
            if self._sendq:
                nxt = self._sendq[0]
                self._send_hdr = memoryview(HEADER.pack(nxt.tag, nxt.nbytes))
                self._send_off = 0
            moved = True
        return moved

    def _progress_rx(self) -> bool:
        moved = False
        while True:
            if self._target is None:
                n = self._read(memoryview(self._hdr)[self._hdr_got:])
                self._hdr_got += n
                moved |= n > 0
                if self._hdr_got < HEADER.size:
                    return moved
                self._hdr_got = 0
                tag, nbytes = HEADER.unpack(self._hdr)
                self._start_message(tag, nbytes)
            assert self._target is not None
            if self._target_got < len(self._target):
                n = self._read(self._target[self._target_got:])
                self._target_got += n
                moved |= n > 0
                if self._target_got < len(self._target):
                    return moved
            self._finish_message()
            moved = True

    def _start_message(self, tag: int, nbytes: int) -> None:
        self._target_tag = tag
        self._target_got = 0
        recvq = self._recvqs[lane_of(tag)]
        if recvq:
            req = recvq[0]
            self._match(req, tag, nbytes)
            self._target_req, self._target_buf, self._target = req, None, req.view
        else:
            buf = bytearray(nbytes)
            self._target_req, self._target_buf, self._target = None, buf, memoryview(buf)

    def _finish_message(self) -> None:
        lane = lane_of(self._target_tag)
        recvq = self._recvqs[lane]
        if self._target_req is not None:
            recvq.popleft()
            self._target_req.done = True
        else:
            assert self._target_buf is not None
            if recvq:  # a receive was posted while this message was arriving
                req = recvq.popleft()
                self._match(req, self._target_tag, len(self._target_buf))
                req.view[:] = self._target_buf
                req.done = True
            else:
                self._unexpected[lane].append((self._target_tag, self._target_buf))
        self._target = self._target_req = self._target_buf = None

    def _match(self, req: Request, tag: int, nbytes: int) -> None:
        if tag != req.tag or nbytes != req.nbytes:
            err = CollectiveMismatchError(
                f"rank {self.my_rank} got a message from rank {self.peer} with tag {tag:#x} and {nbytes} bytes "
                f"where it expected tag {req.tag:#x} and {req.nbytes} bytes: the ranks called different "
                "collectives, or the same one with different counts, dtypes, ops or roots")
            req.error = err
            raise err

    def fail(self, exc: BaseException) -> None:
        """Mark every pending request failed with ``exc`` (the channel is dead)."""
        for req in (*self._sendq, *self._recvqs[0], *self._recvqs[1]):
            req.error = exc
        self._sendq.clear()
        for recvq in self._recvqs:
            recvq.clear()
