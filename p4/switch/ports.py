"""Switch ports on Linux interfaces: AF_PACKET raw sockets, promiscuous, non-blocking batched receive.

Each port is one socket bound to one interface that both receives (every frame arriving at the interface,
never the ones we send: PACKET_IGNORE_OUTGOING, with a PACKET_OUTGOING check as fallback) and transmits.
An interface that goes away marks only its port down; the switch keeps serving the others.
"""

from __future__ import annotations

import errno
import socket
import struct
from dataclasses import dataclass

from p4.errors import P4Error

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_OUTGOING = 4
PACKET_IGNORE_OUTGOING = 23
MAX_FRAME_BYTES = 65536
SOCKET_BUFFER_BYTES = 4 << 20
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
_GONE_ERRNOS = {errno.ENETDOWN, errno.ENXIO, errno.ENODEV, errno.EBADF}


class PortError(P4Error):
    """An interface cannot be opened (missing, no permission); names the port, interface and the cause."""


@dataclass
class PortCounters:
    """Frames and bytes seen on one port; errors are transmit failures (queue full, interface gone)."""

    rx_pkts: int = 0
    rx_bytes: int = 0
    tx_pkts: int = 0
    tx_bytes: int = 0
    tx_errors: int = 0


class Port:
    """One switch port on interface ``ifname``: ``recv_batch()`` and ``send()`` never block."""

    def __init__(self, port_num: int, ifname: str) -> None:
        self.port_num = port_num
        self.ifname = ifname
        self.counters = PortCounters()
        self.up = True
        self.last_error = ""
        try:
            ifindex = socket.if_nametoindex(ifname)
        except OSError:
            raise PortError(f"port {port_num}: interface {ifname!r} does not exist in this namespace") from None
        try:
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        except PermissionError:
            raise PortError(f"port {port_num}@{ifname}: raw sockets need root (CAP_NET_RAW)") from None
        self._filter_outgoing = True
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            self._filter_outgoing = False
        except OSError:
            pass  # kernel < 4.20: fall back to checking the packet type of every frame
        for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:   # beyond net.core.rmem_max/wmem_max (root only): bursts wait in the socket, not dropped
                sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER_BYTES)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER_BYTES)
        sock.bind((ifname, 0))
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        sock.setblocking(False)
        self.sock = sock
        self._buf = bytearray(MAX_FRAME_BYTES)
        self._view = memoryview(self._buf)

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv_batch(self, max_frames: int) -> list[bytes]:
        """Up to ``max_frames`` frames waiting now (empty when none); interface loss marks the port down."""
        frames: list[bytes] = []
        if not self.up:
            return frames
        sock, view = self.sock, self._view
        c = self.counters
        try:
            if self._filter_outgoing:
                while len(frames) < max_frames:
                    n, addr = sock.recvfrom_into(self._buf)
                    if addr[2] == PACKET_OUTGOING:
                        continue
                    frames.append(bytes(view[:n]))
                    c.rx_bytes += n
            else:
                recv_into = sock.recv_into
                while len(frames) < max_frames:
                    n = recv_into(self._buf)
                    frames.append(bytes(view[:n]))
                    c.rx_bytes += n
        except BlockingIOError:
            pass
        except OSError as exc:
            self._on_error(exc)
        c.rx_pkts += len(frames)
        return frames

    def send(self, frame: bytes) -> bool:
        """Transmit one frame; False (counted in tx_errors) when the kernel refuses it."""
        if not self.up:
            self.counters.tx_errors += 1
            return False
        try:
            self.sock.send(frame)
        except OSError as exc:
            self.counters.tx_errors += 1
            if exc.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.EMSGSIZE):
                self._on_error(exc)
            return False
        self.counters.tx_pkts += 1
        self.counters.tx_bytes += len(frame)
        return True

    def _on_error(self, exc: OSError) -> None:
        """Link down keeps the socket (it works again when the link comes back); a vanished interface does not."""
        self.last_error = f"{exc.strerror or exc}"
        if exc.errno in _GONE_ERRNOS and not self.exists():
            self.up = False

    def exists(self) -> bool:
        try:
            socket.if_nametoindex(self.ifname)
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.up = False
        self.sock.close()


def parse_interface_spec(spec: str) -> tuple[int, str]:
    """'1@veth1' -> (1, 'veth1'), the form of simple_switch's ``-i`` flag."""
    num, sep, ifname = spec.partition("@")
    if not sep or not ifname or not num.isdigit():
        raise PortError(f"-i {spec!r}: expected PORT@IFACE, e.g. -i 1@eth1 (port a number 0..510)")
    port_num = int(num)
    if port_num > 510:
        raise PortError(f"-i {spec!r}: port {port_num} out of range 0..510 (511 is the drop port)")
    return port_num, ifname
