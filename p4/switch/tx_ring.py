"""Batched transmit for one switch port: a TPACKET_V2 transmit ring (``PACKET_TX_RING``, mmap) on a send-only
AF_PACKET socket.

``put()`` writes a frame into the next free slot and marks it TP_STATUS_SEND_REQUEST; ``flush()`` hands every
queued slot to the kernel with one ``send`` (MSG_DONTWAIT), which transmits them in ring order.  Each slot starts
with a virtio-net header whose ``hdr_len`` is the whole frame, so the kernel copies the frame into its skb instead
of attaching the slot's page to it (its zero-copy default): a precaution, so that no skb a receiver still queues can
point into a slot we refill.  (On this machine's kernel a plain packet socket that read 64 frames only after 8 laps
of an 8-slot ring got them intact with and without the header; the copy is kept as the safe side, not as a fix.)
The kernel stops at the first slot it cannot send (socket buffer full, the device dropped it, bad format) and leaves
it and every later one queued; ``flush()`` then drops exactly that frame (counted, as a refused ``send`` of the
per-frame path is) and sends the rest again, so a failure costs one frame, not the batch, and order is kept.
"""

from __future__ import annotations

import errno
import mmap
import socket
import struct
from dataclasses import dataclass

from p4.switch.afpacket import (
    ETH_HLEN,
    PACKET_TX_RING,
    PACKET_VERSION,
    PACKET_VNET_HDR,
    PAGE_BYTES,
    SO_SNDBUFFORCE,
    SOL_PACKET,
    TP_STATUS_AVAILABLE,
    TP_STATUS_SEND_REQUEST,
    TP_STATUS_WRONG_FORMAT,
    TPACKET2_HDR_BYTES,
    TPACKET_V2,
    VLAN_HLEN,
    interface_mtu,
    ring_slot_bytes,
)

TX_RING_BYTES = 1 << 20          # per port: 512 slots of 2 KiB at a 1500 B MTU
TX_BLOCK_BYTES = 1 << 16
VNET_HDR_BYTES = 10              # struct virtio_net_hdr: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset
_STATUS_MASK = 7                 # SEND_REQUEST | SENDING | WRONG_FORMAT; higher bits are timestamp flags
_DEVICE_ERRNOS = {errno.ENETDOWN, errno.ENXIO, errno.ENODEV, errno.EBADF}
_DATA = TPACKET2_HDR_BYTES + VNET_HDR_BYTES          # where the frame starts in a slot


@dataclass
class FlushResult:
    """What one ``flush()`` did: frames and bytes the kernel took, frames dropped (refused), the last error."""

    sent_pkts: int = 0
    sent_bytes: int = 0
    refused_pkts: int = 0
    error: OSError | None = None


class TxRing:
    """The transmit ring of interface ``ifname``: about ``ring_bytes`` of slots sized for its MTU.  Raises OSError
    when the kernel refuses the ring or the virtio-net header (the caller then sends frame by frame)."""

    def __init__(self, ifname: str, ring_bytes: int = TX_RING_BYTES, sndbuf_bytes: int = 4 << 20) -> None:
        # protocol 0: the socket never receives (nothing to drain, no copy of the switch's traffic)
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, sndbuf_bytes)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf_bytes)
            self.mtu = interface_mtu(sock, ifname)
            slot_bytes = ring_slot_bytes(self.mtu, _DATA + ETH_HLEN + VLAN_HLEN)
            block_bytes = max(slot_bytes, min(TX_BLOCK_BYTES, ring_bytes // PAGE_BYTES * PAGE_BYTES), PAGE_BYTES)
            blocks = max(1, ring_bytes // block_bytes)
            sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)          # before the ring (EBUSY after)
            sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
            slots = blocks * (block_bytes // slot_bytes)
            sock.setsockopt(SOL_PACKET, PACKET_TX_RING, struct.pack("IIII", block_bytes, blocks, slot_bytes, slots))
            ring = mmap.mmap(sock.fileno(), block_bytes * blocks, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            sock.bind((ifname, 0))
        except OSError:
            sock.close()
            raise
        self.sock = sock
        self._ring = ring
        self._view = memoryview(ring)
        self._u32 = self._view.cast("I")
        self._u16 = self._view.cast("H")
        self.slots = slots
        self._slot_bytes = slot_bytes
        # the largest frame a slot holds; frames beyond the MTU are refused here (the kernel skips its MTU check
        # for sockets with a virtio-net header), as the per-frame send() refuses them with EMSGSIZE
        self.max_frame_bytes = min(slot_bytes - _DATA, self.mtu + ETH_HLEN + VLAN_HLEN)
        self._plain_max = min(self.max_frame_bytes, self.mtu + ETH_HLEN)     # an untagged frame's limit
        self._head = 0            # next slot to fill
        self._first = 0           # first queued slot (where the kernel's own head is)
        self.queued_pkts = 0
        self._queued_bytes = 0    # frame bytes queued: what send() returns when it took them all
        self.partial_flushes = 0  # flushes the kernel stopped short in (a slot dropped, or the link down)

    def put(self, frame: bytes) -> int:
        """Queue ``frame`` in the next slot: 1; 0 when that slot is not free (still queued or still in flight:
        flush, then try once more); -1 when the interface may not carry it (shorter than an Ethernet header, longer
        than the MTU, or than MTU + 4 if 802.1Q-tagged: what the per-frame send() refuses with EINVAL/EMSGSIZE)."""
        n = len(frame)
        if n > self._plain_max and (n > self.max_frame_bytes or frame[12:14] != b"\x81\x00") or n < ETH_HLEN:
            return -1
        u32, off = self._u32, self._head * self._slot_bytes
        i = off >> 2
        if u32[i] & _STATUS_MASK:
            return 0
        self._ring[off + _DATA: off + _DATA + n] = frame
        u32[i + 1] = u32[i + 2] = n + VNET_HDR_BYTES                   # tp_len, tp_snaplen
        # virtio_net_hdr: hdr_len = the whole frame (copied into the skb); its other fields (no flags, GSO_NONE)
        # stay the zeros of the fresh mapping: neither we nor the kernel write them
        self._u16[(off + TPACKET2_HDR_BYTES + 2) >> 1] = n
        u32[i] = TP_STATUS_SEND_REQUEST
        self._head = self._head + 1 if self._head + 1 < self.slots else 0
        self.queued_pkts += 1
        self._queued_bytes += n
        return 1

    def flush(self) -> FlushResult:
        """Hand every queued slot to the kernel; a slot it refuses is dropped and the rest sent again."""
        res = FlushResult()
        while self.queued_pkts:
            try:
                taken_bytes = self.sock.send(b"", socket.MSG_DONTWAIT)
                device_gone = False
            except OSError as exc:
                taken_bytes, res.error, device_gone = -1, exc, exc.errno in _DEVICE_ERRNOS
            if taken_bytes == self._queued_bytes:     # the frames' bytes it sent: all of them (fast path)
                res.sent_pkts += self.queued_pkts
                res.sent_bytes += self._queued_bytes
                self._first = self._head
                self.queued_pkts = self._queued_bytes = 0
                return res
            self.partial_flushes += 1
            self._count_taken(res)
            if device_gone:                      # the interface is down or gone: every queued frame is refused
                res.refused_pkts += self.queued_pkts
                self._release(self._first, self.queued_pkts)
            elif self.queued_pkts:
                self._drop_first(res)
        return res

    def _count_taken(self, res: FlushResult) -> None:
        """After a partial send: count the queued slots the kernel took, up to the one it stopped at."""
        u32, sb, slots = self._u32, self._slot_bytes, self.slots
        k = self._first
        while self.queued_pkts:
            i = (k * sb) >> 2
            if (u32[i] & _STATUS_MASK) in (TP_STATUS_SEND_REQUEST, TP_STATUS_WRONG_FORMAT):
                break
            n = u32[i + 1] - VNET_HDR_BYTES
            res.sent_pkts += 1
            res.sent_bytes += n
            self.queued_pkts -= 1
            self._queued_bytes -= n
            k = k + 1 if k + 1 < slots else 0
        self._first = k

    def _drop_first(self, res: FlushResult) -> None:
        """The kernel's head stays on the first queued slot: drop that frame, move the later ones down one slot."""
        u32, sb, slots, k = self._u32, self._slot_bytes, self.slots, self._first
        later: list[bytes] = []
        j = k + 1 if k + 1 < slots else 0
        for _ in range(self.queued_pkts - 1):
            off = j * sb
            later.append(self._ring[off + _DATA: off + _DATA + u32[(off >> 2) + 1] - VNET_HDR_BYTES])
            j = j + 1 if j + 1 < slots else 0
        res.refused_pkts += 1
        self._release(k, self.queued_pkts)
        for frame in later:
            self.put(frame)

    def _release(self, first: int, count: int) -> None:
        """Slots ``first`` .. ``first + count - 1`` back to free; the ring refills from ``first``."""
        u32, sb, slots = self._u32, self._slot_bytes, self.slots
        j = first
        for _ in range(count):
            u32[(j * sb) >> 2] = TP_STATUS_AVAILABLE
            j = j + 1 if j + 1 < slots else 0
        self._head = self._first = first
        self.queued_pkts = self._queued_bytes = 0

    def close(self) -> None:
        self._u32.release()
        self._u16.release()
        self._view.release()
        self._ring.close()
        self.sock.close()
