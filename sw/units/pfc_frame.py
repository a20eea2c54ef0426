"""802.1Qbb priority flow control frames: build and parse the MAC control PAUSE-per-priority frame.

Layout: dst 01:80:C2:00:00:01, src, EtherType 0x8808, opcode 0x0101, class-enable vector (bit p = priority p),
eight 16-bit pause times in quanta (1 quantum = 512 bit times at the link's rate), zero padding to 60 bytes.
The one PFC codec of the project (switch, host NIC, tests): a leaf with no state.
"""

from __future__ import annotations

import struct

PFC_DST_MAC = bytes.fromhex("0180c2000001")
MAC_CONTROL_ETHERTYPE = 0x8808
PFC_OPCODE = 0x0101
PFC_PRIORITIES = 8
PFC_MAX_QUANTA = 0xFFFF
BITS_PER_QUANTUM = 512
MIN_FRAME_BYTES = 60          # without FCS
_BODY = struct.Struct("!HHH8H")
PFC_BODY_END = 12 + _BODY.size  # a MAC control frame shorter than this cannot hold a PFC body


def build_pfc_frame(src_mac: bytes, quanta_by_priority: dict[int, int]) -> bytes:
    """A PFC frame pausing (quanta > 0) or resuming (quanta 0) each listed priority; others not enabled."""
    if len(src_mac) != 6:
        raise ValueError(f"source MAC must be 6 bytes, got {len(src_mac)}")
    vector = 0
    times = [0] * PFC_PRIORITIES
    for prio, quanta in quanta_by_priority.items():
        if not 0 <= prio < PFC_PRIORITIES:
            raise ValueError(f"PFC priority {prio}: allowed 0..{PFC_PRIORITIES - 1}")
        if not 0 <= quanta <= PFC_MAX_QUANTA:
            raise ValueError(f"PFC quanta {quanta}: allowed 0..{PFC_MAX_QUANTA}")
        vector |= 1 << prio
        times[prio] = quanta
    frame = PFC_DST_MAC + src_mac + _BODY.pack(MAC_CONTROL_ETHERTYPE, PFC_OPCODE, vector, *times)
    return frame + bytes(MIN_FRAME_BYTES - len(frame))


def is_mac_control(frame: bytes) -> bool:
    """True for any MAC control frame (EtherType 0x8808): a bridge consumes these, it never forwards them."""
    return len(frame) >= 14 and frame[12] == 0x88 and frame[13] == 0x08


def parse_pfc_frame(frame: bytes) -> dict[int, int] | None:
    """{priority: quanta} for each class enabled in a PFC frame; None when ``frame`` is not a PFC frame."""
    if len(frame) < PFC_BODY_END or not is_mac_control(frame):
        return None
    _etype, opcode, vector, *times = _BODY.unpack_from(frame, 12)
    if opcode != PFC_OPCODE:
        return None
    return {p: times[p] for p in range(PFC_PRIORITIES) if vector & (1 << p)}


def quanta_to_ns(quanta: int, rate_bps: float) -> int:
    """How long ``quanta`` pause quanta last on a link of ``rate_bps`` bit/s."""
    return int(quanta * BITS_PER_QUANTUM * 1_000_000_000 / rate_bps)


def frame_dscp(frame: bytes) -> int | None:
    """The DSCP of an IPv4/IPv6 frame (one 802.1Q tag allowed), None for anything else."""
    off = 12
    etype = frame[off:off + 2]
    if etype == b"\x81\x00":
        off += 4
        etype = frame[off:off + 2]
    if etype == b"\x08\x00" and len(frame) > off + 3:
        return frame[off + 3] >> 2
    if etype == b"\x86\xdd" and len(frame) > off + 4:
        return ((frame[off + 2] & 0x0F) << 2) | (frame[off + 3] >> 6)
    return None
