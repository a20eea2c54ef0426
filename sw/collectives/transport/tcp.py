"""Inter-server transport over TCP sockets, as NCCL's socket transport: one connection per remote peer.

Each rank listens on its NIC's address (the rail it sits on); the lower rank of a pair connects, announces
its rank, and both sides then use the socket non-blocking as a framed byte stream.
"""

from __future__ import annotations

import socket
import struct

from sw.clock import Clock

from ..deadline import Backoff, Deadline
from ..errors import CollectiveTimeoutError, CollectiveUserError, PeerGoneError
from .base import Request, StreamChannel, ThrottledChannelTransport
from .throttle import Throttle

_HELLO = struct.Struct("<q")
_SOCK_BUF_BYTES = 4 * 1024 * 1024


class TcpChannel(StreamChannel):
    """A connected non-blocking socket to one remote peer."""

    def __init__(self, my_rank: int, peer: int, sock: socket.socket, throttle: Throttle | None) -> None:
        super().__init__(my_rank, peer)
        self.sock = sock
        self.throttle = throttle
        self.eof = False

    def _gone(self) -> PeerGoneError:
        return PeerGoneError(f"rank {self.my_rank}: rank {self.peer} closed its connection (exited or crashed)")

    def post_recv(self, req: Request) -> None:
        super().post_recv(req)
        if self.eof and not req.done:
            raise self._gone()

    def _write(self, view: memoryview) -> int:
        limit = len(view)
        if self.throttle is not None:
            limit = self.throttle.grant(limit)
            if limit == 0:
                return 0
        try:
            return self.sock.send(view[:limit])
        except BlockingIOError:
            if self.throttle is not None:  # give back what the kernel did not take
                self.throttle.refund(limit)
            return 0
        except OSError as exc:
            raise PeerGoneError(f"rank {self.my_rank}: connection to rank {self.peer} failed ({exc})") from None

    def _read(self, view: memoryview) -> int:
        if self.eof:  # a peer that finished and closed is fine unless we still expect bytes from it
            if self._expecting():
                raise self._gone()
            return 0
        try:
            n = self.sock.recv_into(view)
        except BlockingIOError:
            return 0
        except OSError as exc:
            raise PeerGoneError(f"rank {self.my_rank}: connection to rank {self.peer} failed ({exc})") from None
        if n == 0:
            self.eof = True
            if self._expecting():
                raise self._gone()
        return n


def listen(addr: str) -> socket.socket:
    """A listening socket on ``addr`` (the rank's NIC address), kernel-chosen port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((addr, 0))
    except OSError as exc:
        sock.close()
        raise CollectiveUserError(f"NIC address {addr!r}: cannot bind a socket there ({exc.strerror})") from None
    sock.listen(256)
    return sock


def _tune(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCK_BUF_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCK_BUF_BYTES)


class TcpTransport(ThrottledChannelTransport):
    """Sockets to every remote peer; egress optionally throttled to ``rate_bps`` (one rail port)."""

    name = "tcp"

    @classmethod
    def connect(cls, my_rank: int, listener: socket.socket, remote: dict[int, tuple[str, int]],
                timeout_s: float, rate_bps: float | None = None, clock: Clock | None = None) -> TcpTransport:
        """Connect to higher remote ranks, accept the lower ones; ``remote`` maps rank -> (addr, port)."""
        deadline = Deadline(timeout_s, clock)
        socks: dict[int, socket.socket] = {}
        try:
            for peer in sorted(p for p in remote if p > my_rank):
                try:  # from our own NIC's address, so the bytes leave on this rank's rail
                    sock = socket.create_connection(remote[peer], timeout=timeout_s,
                                                    source_address=(listener.getsockname()[0], 0))
                except OSError as exc:
                    raise PeerGoneError(f"rank {my_rank}: cannot connect to rank {peer} at "
                                        f"{remote[peer][0]}:{remote[peer][1]} ({exc})") from None
                sock.sendall(_HELLO.pack(my_rank))
                socks[peer] = sock
            expected = {p for p in remote if p < my_rank}
            listener.settimeout(0.05)
            backoff = Backoff(clock, spins=0)
            while expected - socks.keys():
                try:
                    sock, _ = listener.accept()
                except TimeoutError:
                    missing = sorted(expected - socks.keys())
                    deadline.check(f"TCP connections from ranks {missing} to rank {my_rank}")
                    backoff.idle()
                    continue
                sock.settimeout(timeout_s)
                (peer,) = _HELLO.unpack(_recv_exact(sock, _HELLO.size))
                if peer not in expected or peer in socks:
                    sock.close()
                    continue
                socks[peer] = sock
        except BaseException:
            for sock in socks.values():
                sock.close()
            raise
        finally:
            listener.close()
        throttle = Throttle(rate_bps, clock=clock) if rate_bps else None
        channels = {}
        for peer, sock in socks.items():
            _tune(sock)
            sock.setblocking(False)
            channels[peer] = TcpChannel(my_rank, peer, sock, throttle)
        return cls(my_rank, channels, throttle)


    def progress(self) -> bool:
        return self._progress_channels()

    def close(self) -> None:
        for ch in self.channels.values():
            ch.sock.close()
        self.channels = {}


def _recv_exact(sock: socket.socket, nbytes: int) -> bytes:
    buf = bytearray()
    while len(buf) < nbytes:
        try:
            chunk = sock.recv(nbytes - len(buf))
        except TimeoutError:
            raise CollectiveTimeoutError("timed out reading a TCP hello from a peer") from None
        if not chunk:
            raise PeerGoneError("a peer closed its connection during the TCP hello")
        buf += chunk
    return bytes(buf)
