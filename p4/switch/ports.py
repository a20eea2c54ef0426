"""Switch ports on Linux interfaces: AF_PACKET raw sockets, promiscuous, non-blocking batched receive and transmit.

Each port is one socket bound to one interface that receives (every frame arriving at the interface, never the
ones we send: PACKET_IGNORE_OUTGOING, with a PACKET_OUTGOING check as fallback) and, when the kernel grants no
transmit ring (or ``STARPULSE_P4SWITCH_TX_RING=0``), transmits one ``send()`` per frame.  With the ring
(``p4.switch.tx_ring``, a second, send-only socket) ``send()`` queues and ``flush()`` transmits the queue.
An interface that goes away marks only its port down; the switch keeps serving the others.
"""

from __future__ import annotations

import errno
import mmap
import os
import socket
import struct
from dataclasses import dataclass

from p4.errors import P4Error
from p4.switch.afpacket import (
    ETH_HLEN,
    ETH_P_ALL,
    PACKET_ADD_MEMBERSHIP,
    PACKET_IGNORE_OUTGOING,
    PACKET_MR_PROMISC,
    PACKET_OUTGOING,
    PACKET_RX_RING,
    PACKET_STATISTICS,
    PACKET_VERSION,
    PAGE_BYTES,
    SO_RCVBUFFORCE,
    SO_SNDBUFFORCE,
    SOL_PACKET,
    TP_STATUS_USER,
    TPACKET_V2,
    VLAN_HLEN,
    interface_mtu,
    ring_slot_bytes,
)
from p4.switch.tx_ring import TX_RING_BYTES, TxRing

MAX_FRAME_BYTES = 65536
SOCKET_BUFFER_BYTES = 4 << 20
RX_RING_FRAMES = 2048
"""Frames the default receive ring holds: 4 MiB of 2 KiB slots at a 1,500-byte MTU; a jumbo MTU's 16 KiB slots get
as many (32 MiB): with a fixed 4 MiB a burst of small frames overflowed its 256."""
RING_ENV = "STARPULSE_P4SWITCH_RING"     # "0" turns the receive ring off (plain recv() per frame)
RING_BYTES_ENV = "STARPULSE_P4SWITCH_RING_BYTES"   # receive ring size per port (a tiny one forces kernel drops)
TX_RING_ENV = "STARPULSE_P4SWITCH_TX_RING"   # "0" turns the transmit ring off (one send() per frame)
RING_BLOCK_BYTES = 1 << 16
_GONE_ERRNOS = {errno.ENETDOWN, errno.ENXIO, errno.ENODEV, errno.EBADF}


class SwitchPortError(P4Error):
    """An interface cannot be opened (missing, no permission); names the port, interface and the cause."""


@dataclass
class SwitchPortCounters:
    """Frames and bytes seen on one port; errors are transmit failures (queue full, interface gone)."""

    rx_pkts: int = 0
    rx_bytes: int = 0
    rx_truncated: int = 0      # frames longer than the receive ring's slots (GRO/LRO left on): dropped
    rx_kernel_drops: int = 0   # frames the kernel dropped because our ring/socket buffer was full
    tx_pkts: int = 0
    tx_bytes: int = 0
    tx_errors: int = 0
    tx_ring_full: int = 0      # of tx_errors: frames refused because every transmit ring slot was still in flight


class SwitchPort:
    """One switch port on interface ``ifname``: ``recv_batch()``, ``send()`` and ``flush()`` never block."""

    def __init__(self, port_num: int, ifname: str, rx_timestamps: bool = True,
                 tx_ring_bytes: int = TX_RING_BYTES) -> None:
        self.port_num = port_num
        self.ifname = ifname
        self.counters = SwitchPortCounters()
        self.up = True
        self.last_error = ""
        # CLOCK_REALTIME ns at which the kernel received the first and last frame of the last ring batch
        # (0: no ring, no timestamps, or ``rx_timestamps`` off); the switch's lag accounting reads them
        self.rx_timestamps = rx_timestamps
        self.rx_first_ts_ns = 0
        self.rx_last_ts_ns = 0
        try:
            ifindex = socket.if_nametoindex(ifname)
        except OSError:
            raise SwitchPortError(f"port {port_num}: interface {ifname!r} does not exist in this namespace") from None
        try:
            # protocol 0: receives nothing until bind() below names the interface, so no frame of another
            # interface can slip in between socket() and bind()
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        except PermissionError:
            raise SwitchPortError(f"port {port_num}@{ifname}: raw sockets need root (CAP_NET_RAW)") from None
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
        sock.setblocking(False)
        self.sock = sock
        self._buf = bytearray(MAX_FRAME_BYTES)
        self._view = memoryview(self._buf)
        self._ring: mmap.mmap | None = None
        if os.environ.get(RING_ENV, "1") != "0" and not self._filter_outgoing:
            self._setup_ring(ifname, ring_bytes_from_env())     # before bind: every frame then lands in the ring
        sock.bind((ifname, ETH_P_ALL))
        mreq = struct.pack("iHH8s", ifindex, PACKET_MR_PROMISC, 0, b"")
        sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
        self.tx_ring: TxRing | None = None
        if os.environ.get(TX_RING_ENV, "1") != "0":
            try:
                self.tx_ring = TxRing(ifname, tx_ring_bytes, SOCKET_BUFFER_BYTES)
            except OSError:
                pass        # no transmit ring (or no virtio-net header): one send() per frame still works

    def _setup_ring(self, ifname: str, ring_bytes: int | None) -> None:
        """A TPACKET_V2 receive ring of about ``ring_bytes`` (None: ``RX_RING_FRAMES`` slots; at least one page-sized
        block holding one frame):
        the kernel writes frames into shared memory, no syscall per frame."""
        try:
            frame_bytes = ring_slot_bytes(interface_mtu(self.sock, ifname), ETH_HLEN + VLAN_HLEN + 128)
            if ring_bytes is None:                 # the default: as many frames at any MTU
                ring_bytes = RX_RING_FRAMES * frame_bytes
            block_bytes = max(frame_bytes, min(RING_BLOCK_BYTES, ring_bytes // PAGE_BYTES * PAGE_BYTES), PAGE_BYTES)
            blocks = max(1, ring_bytes // block_bytes)
            self.sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
            req = struct.pack("IIII", block_bytes, blocks, frame_bytes, blocks * (block_bytes // frame_bytes))
            self.sock.setsockopt(SOL_PACKET, PACKET_RX_RING, req)
            ring = mmap.mmap(self.sock.fileno(), block_bytes * blocks, mmap.MAP_SHARED,
                             mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            return          # no ring support: recv() per frame still works
        self._ring = ring
        self._ring_view = memoryview(ring)
        self._u32 = self._ring_view.cast("I")
        self._u16 = self._ring_view.cast("H")
        self._frame_bytes = frame_bytes
        self._frames = blocks * (block_bytes // frame_bytes)
        self._head = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv_batch(self, max_frames: int) -> list[bytes]:
        """Up to ``max_frames`` frames waiting now (empty when none); interface loss marks the port down."""
        frames: list[bytes] = []
        if not self.up:
            return frames
        if self._ring is not None:
            return self._recv_ring(self._ring, max_frames, frames)
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

    def _recv_ring(self, ring: mmap.mmap, max_frames: int, frames: list[bytes]) -> list[bytes]:
        """Frames from the ring's ready slots, in order.  The kernel receive timestamps (tp_sec, tp_nsec) of the
        batch's first and last slot are read once per batch, each before its slot goes back to the kernel (a
        slot read after its release may already hold a newer frame): no per-frame cost for the lag accounting."""
        u32, u16 = self._u32, self._u16
        fb, n, head = self._frame_bytes, self._frames, self._head
        off = head * fb
        if u32[off >> 2] & TP_STATUS_USER and max_frames > 0:
            stamps = self.rx_timestamps
            if stamps:
                self.rx_first_ts_ns = u32[(off + 16) >> 2] * 1_000_000_000 + u32[(off + 20) >> 2]
            c = self.counters
            nbytes = 0
            max_frames = min(max_frames, n)      # at most one lap: the last slot is still ours when the loop ends
            while True:
                length, snap, mac = u32[(off + 4) >> 2], u32[(off + 8) >> 2], u16[(off + 12) >> 1]
                if snap == length:
                    frames.append(ring[off + mac: off + mac + snap])
                    nbytes += snap
                else:
                    c.rx_truncated += 1
                    max_frames -= 1               # a slot visited all the same (the lap's limit)
                head = head + 1 if head + 1 < n else 0
                nxt = head * fb
                if len(frames) >= max_frames or not u32[nxt >> 2] & TP_STATUS_USER:
                    break
                u32[off >> 2] = 0                                  # slot back to the kernel
                off = nxt
            if stamps:                                             # the last slot: read, then released
                self.rx_last_ts_ns = u32[(off + 16) >> 2] * 1_000_000_000 + u32[(off + 20) >> 2]
            u32[off >> 2] = 0
            self._head = head
            c.rx_pkts += len(frames)
            c.rx_bytes += nbytes
        if not frames:
            # woken without frames: consume a pending socket error (ENETDOWN when the link goes down), else
            # poll() would report it forever; a deleted interface takes the port down for good
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self.last_error = os.strerror(err)
                if not self.exists():
                    self.up = False
        return frames

    def send(self, frame: bytes) -> bool:
        """Transmit one frame (with the transmit ring: queue it until ``flush()``, counted in tx_pkts there);
        False (counted in tx_errors) when the kernel refuses it or the ring has no free slot even after a flush."""
        if not self.up:
            self.counters.tx_errors += 1
            return False
        tx = self.tx_ring
        if tx is not None:
            queued = tx.put(frame)
            if queued > 0:
                return True
            if queued == 0:                      # full: whatever is queued goes out, then one more try
                self.flush()
                queued = tx.put(frame)
                if queued > 0:
                    return True
                if queued == 0:
                    self.counters.tx_ring_full += 1
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

    def flush(self) -> None:
        """Transmit what ``send()`` queued in the ring (one syscall): taken frames count in tx_pkts/tx_bytes,
        frames the kernel refused in tx_errors (each one, as the per-frame path counts a refused send)."""
        tx = self.tx_ring
        if tx is None or not tx.queued_pkts:
            return
        res = tx.flush()
        c = self.counters
        c.tx_pkts += res.sent_pkts
        c.tx_bytes += res.sent_bytes
        c.tx_errors += res.refused_pkts
        if res.error is not None and res.error.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.EMSGSIZE):
            self._on_error(res.error)

    def _on_error(self, exc: OSError) -> None:
        """Link down keeps the socket (it works again when the link comes back); a vanished interface does not."""
        self.last_error = f"{exc.strerror or exc}"
        if exc.errno in _GONE_ERRNOS and not self.exists():
            self.up = False

    def poll_kernel_drops(self) -> int:
        """Add the kernel's drop count for this socket (reading it resets it) to the counters."""
        if self.sock.fileno() < 0:
            return self.counters.rx_kernel_drops
        try:
            _packets, drops = struct.unpack("II", self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
        except OSError:
            return self.counters.rx_kernel_drops
        self.counters.rx_kernel_drops += drops
        return self.counters.rx_kernel_drops

    def exists(self) -> bool:
        try:
            socket.if_nametoindex(self.ifname)
        except OSError:
            return False
        return True

    def close(self) -> None:
        if self.tx_ring is not None:
            if self.up:
                self.flush()
            self.tx_ring.close()
            self.tx_ring = None
        self.up = False
        if self._ring is not None:
            self._u32.release()
            self._u16.release()
            self._ring_view.release()
            self._ring.close()
            self._ring = None
        self.sock.close()


def ring_bytes_from_env() -> int | None:
    """The receive ring size: ``STARPULSE_P4SWITCH_RING_BYTES`` if set (a positive integer), else None (the
    default: ``RX_RING_FRAMES`` slots of the interface's MTU)."""
    text = os.environ.get(RING_BYTES_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) <= 0:
        raise SwitchPortError(f"{RING_BYTES_ENV}={text!r}: expected a positive number of bytes, e.g. 4096")
    return int(text)


def parse_interface_spec(spec: str) -> tuple[int, str]:
    """'1@veth1' -> (1, 'veth1'), the form of simple_switch's ``-i`` flag."""
    num, sep, ifname = spec.partition("@")
    if not sep or not ifname or not num.isdigit():
        raise SwitchPortError(f"-i {spec!r}: expected PORT@IFACE, e.g. -i 1@eth1 (port a number 0..510)")
    port_num = int(num)
    if port_num > 510:
        raise SwitchPortError(f"-i {spec!r}: port {port_num} out of range 0..510 (511 is the drop port)")
    return port_num, ifname
