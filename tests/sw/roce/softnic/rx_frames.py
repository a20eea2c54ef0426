"""Real frames of every kind a receive path meets (RoCE data/ACK/CNP, INT-carrying, PFC, IPv6), the two frames
of issue 24 that killed a NIC, and a NIC pair on an in-memory wire in the middle of an RDMA WRITE: the shared
material of the malformed-frame and fuzz tests."""

from __future__ import annotations

import random
import struct
from collections.abc import Sequence

import numpy as np

from sw.clock import ManualClock
from sw.roce.softnic.loopback import LinkProfile, MemoryWire, run_until
from sw.roce.softnic.nic import SoftNic
from sw.roce.transport.qp_connect import connect, qp_info
from sw.roce.transport.verbs import CompletionQueue, SendWr, WcStatus, WrOpcode
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.flow import Flow
from sw.roce.wire.gid import fabric_ipv6
from sw.roce.wire.icrc import icrc, icrc_bytes
from sw.roce.wire.int_md import IntHopRecord, insert_int, ipv4_checksum
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.template import FlowTemplates
from sw.units.pfc_frame import build_pfc_frame

MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
IP_A, IP_B = "10.9.0.1", "10.9.0.2"
HOP = IntHopRecord(node_id=3, ingress_port=1, egress_port=2, hop_latency=40, queue_id=3, queue_occupancy=7,
                   egress_timestamp=123_456, egress_tx_bytes=99_000)


def templates(*, ipv6: bool = False, dst_qp: int = 0x11, macs: tuple[str, str] = (MAC_A, MAC_B),
              ips: tuple[str, str] = (IP_A, IP_B)) -> FlowTemplates:
    """Templates of a flow between ``macs``/``ips`` (IPv4, or IPv6 in the fabric's plan) towards QP ``dst_qp``."""
    src, dst = (fabric_ipv6(ips[0]), fabric_ipv6(ips[1])) if ipv6 else ips
    return FlowTemplates(Flow(macs[0], macs[1], src, dst, 0x12, dst_qp))


def real_frames(dst_qp: int = 0x11, *, macs: tuple[str, str] = (MAC_A, MAC_B),
                ips: tuple[str, str] = (IP_A, IP_B)) -> dict[str, bytes]:
    """One well-formed frame of each kind a NIC, the switch or a collector receives (RoCE ones to ``dst_qp``,
    from ``macs[0]``/``ips[0]`` to ``macs[1]``/``ips[1]``)."""
    t4 = templates(dst_qp=dst_qp, macs=macs, ips=ips)
    t6 = templates(ipv6=True, dst_qp=dst_qp, macs=macs, ips=ips)
    write = t4[Opcode.RDMA_WRITE_ONLY].build(5, bytes(range(64)), ackreq=True,
        ext=HeaderFields(va=0x1000, rkey=7, dma_len=64))
    ack = t4[Opcode.ACKNOWLEDGE].build(5, b"", ext=HeaderFields(syndrome=0x1F, msn=1))
    return {
        "write": write,
        "write_v6": t6[Opcode.RDMA_WRITE_ONLY].build(5, bytes(64), ackreq=True,
            ext=HeaderFields(va=0x1000, rkey=7, dma_len=64)),
        "send": t4[Opcode.SEND_ONLY].build(9, b"hello"),
        "ack": ack,
        "cnp": t4[Opcode.CNP].build(0, b""),
        "int_write": insert_int(write, [HOP, HOP], echo=False, remaining_hop_cnt=2),
        "int_ack_v6": insert_int(t6[Opcode.ACKNOWLEDGE].build(5, b"", ext=HeaderFields(syndrome=0x1F, msn=1)), [HOP]),
        "int_echo": insert_int(ack, [HOP, HOP, HOP]),
        "pfc": build_pfc_frame(bytes.fromhex(macs[0].replace(":", "")), {3: 0xFFFF}),
    }


def int_frame_short_ip_udp_length() -> bytes:
    """Issue 24's 158-byte frame: a SEND with a 3-hop INT stack whose IPv4 total and UDP lengths still count
    only the RoCE part (shorter than the INT stack), IPv4 checksum right."""
    frame = bytearray(insert_int(templates()[Opcode.SEND_ONLY].build(1, b""), [HOP] * 3, echo=False))
    assert len(frame) == 158
    struct.pack_into(">H", frame, 14 + 2, 20 + 8 + 16)      # IPv4 total length: less than the INT stack
    struct.pack_into(">H", frame, 14 + 20 + 4, 8 + 16)      # UDP length likewise
    struct.pack_into(">H", frame, 14 + 10, 0)
    struct.pack_into(">H", frame, 14 + 10, ipv4_checksum(frame[14:34]))
    return bytes(frame)


def int_frame_ihl_zero() -> bytes:
    """Issue 24's other killer: an INT-marked IPv4 frame whose header length (IHL) is 0."""
    frame = bytearray(real_frames()["int_write"])
    frame[14] = 0x40
    return bytes(frame)


class WritePair:
    """NICs A and B on an in-memory wire (ManualClock), one connected QP each, and an RDMA WRITE A -> B of
    ``size_bytes`` posted; ``inject`` puts frames into B's receive queue between the WRITE's frames."""

    def __init__(self, size_bytes: int = 256 * 1024, seed: int = 1, *, cc: str = "none",
                 a_to_b: LinkProfile | None = None, b_to_a: LinkProfile | None = None) -> None:
        self.clock = ManualClock()
        self.wire = MemoryWire(self.clock, a_to_b, b_to_a)
        self.a = SoftNic(self.wire.ports[0], mac=MAC_A, ip=IP_A, line_rate_bps=10**9, clock=self.clock, cc=cc)
        self.b = SoftNic(self.wire.ports[1], mac=MAC_B, ip=IP_B, line_rate_bps=10**9, clock=self.clock)
        pd_a, pd_b = self.a.alloc_pd(), self.b.alloc_pd()
        self.cq_a: CompletionQueue = self.a.create_cq()
        qa, qb = self.a.create_qp(pd_a, self.cq_a), self.b.create_qp(pd_b, self.b.create_cq())
        connect(qa, 1, qp_info(qb, 2), path_mtu=1024)
        connect(qb, 2, qp_info(qa, 1), path_mtu=1024)
        self.src = np.random.default_rng(seed).integers(0, 256, size_bytes, dtype=np.uint8)
        self.dst = np.zeros_like(self.src)
        ms, md = pd_a.reg_mr(self.src), pd_b.reg_mr(self.dst)
        qa.post_send(SendWr(1, WrOpcode.RDMA_WRITE, ms.sge(), remote_addr=md.addr, rkey=md.rkey))

    def inject(self, frames: list[bytes]) -> None:
        """``frames`` arrive at B now, then both engines run one round (B's receive loop reads them)."""
        self.wire.ports[1].inbox.extend(frames)
        self.wire.deliver()
        self.a.progress()
        self.b.progress()

    def finish(self) -> None:
        """Run the WRITE to its completion; assert it succeeded with exact data."""
        assert run_until(self.clock, self.wire, [self.a, self.b], lambda: len(self.cq_a) >= 1, 10 * 10**9)
        assert [w.status for w in self.cq_a.poll()] == [WcStatus.SUCCESS]
        assert np.array_equal(self.dst, self.src)


# --- mutations -----------------------------------------------------------------------------------------------
JUMBO_BYTES = 9216
# Ethernet type; IPv4 version/IHL, TOS, total length, flags/fragment, protocol, checksum; IPv6 payload length and
# next header; UDP ports and length after IPv4 and IPv6; BTH opcode/flags and the INT shim length and hop words
# (after IPv4 and IPv6 UDP); PFC opcode and class vector share 14 and 16.  The IP lengths come twice: they
# matter most.
FIELD_OFFSETS = (12, 14, 15, 16, 18, 20, 23, 24, 34, 36, 38, 42, 43, 46, 48, 54, 56, 58, 63, 68, 16, 18)
FIELD_VALUES = (0, 1, 4, 5, 8, 0x0F, 0x10, 20, 28, 44, 0x40, 0x44, 0x46, 0x4F, 0x60, 0x17 << 2, 0x80, 0xFF,
                0x100, 0x7FFF, 0xFFFF)
Op = tuple[str, int, int]


def mutate(frame: bytes, ops: Sequence[Op]) -> bytes:
    """``frame`` after ``ops`` in order: ("cut", n, _) keeps n bytes; ("flip", i, bit) and ("byte", i, value)
    edit byte i (modulo the length); ("u8"/"u16", k, value) write FIELD_OFFSETS[k], ("sub", k, d) takes d off the
    16-bit field there (a length shorter than what it covers); ("grow", n, seed) appends n
    seeded random bytes (at most to JUMBO_BYTES); ("fix", _, _) makes the IPv4 checksum and the ICRC right again
    so that the frame gets past them."""
    f = bytearray(frame)
    for kind, a, b in ops:
        if kind == "cut":
            del f[a:]
        elif kind in ("flip", "byte") and f:
            f[a % len(f)] = f[a % len(f)] ^ (1 << (b & 7)) if kind == "flip" else b & 0xFF
        elif kind in ("u8", "u16", "sub"):
            off = FIELD_OFFSETS[a % len(FIELD_OFFSETS)]
            if kind == "u8" and off < len(f):
                f[off] = b & 0xFF
            elif kind == "u16" and off + 2 <= len(f):
                struct.pack_into(">H", f, off, b & 0xFFFF)
            elif kind == "sub" and off + 2 <= len(f):
                struct.pack_into(">H", f, off, (struct.unpack_from(">H", f, off)[0] - b) & 0xFFFF)
        elif kind == "grow":
            f += random.Random(b).randbytes(max(0, min(a, JUMBO_BYTES - len(f))))
        elif kind == "fix":
            _fix_checksums(f)
    return bytes(f)


def _fix_checksums(f: bytearray) -> None:
    if len(f) < 34 or f[12:14] not in (b"\x08\x00", b"\x86\xdd"):
        return
    ipv4 = f[12:14] == b"\x08\x00"
    ihl = (f[14] & 0x0F) * 4 if ipv4 else 40
    if ipv4 and 20 <= ihl and 14 + ihl <= len(f):
        struct.pack_into(">H", f, 24, 0)
        struct.pack_into(">H", f, 24, ipv4_checksum(f[14:14 + ihl]))
    if len(f) < 20:
        return
    end = 14 + (struct.unpack_from(">H", f, 16)[0] if ipv4 else 40 + struct.unpack_from(">H", f, 18)[0])
    if end <= len(f):
        try:
            f[end - 4:end] = icrc_bytes(icrc(f[14:end]))
        except RoceFormatError:
            pass


def random_ops(rng: random.Random) -> list[Op]:
    """One to four mutations as the live fuzz draws them (the hypothesis tests draw the same kinds)."""
    ops: list[Op] = []
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(("cut", "flip", "flip", "byte", "u8", "u16", "sub", "sub", "grow", "fix"))
        if kind == "cut":
            ops.append((kind, rng.choice((0, 1, 13, 14, 20, 33, 34, 41, 42, 54, 58, 62, rng.randrange(200))), 0))
        elif kind in ("flip", "byte"):
            ops.append((kind, rng.randrange(256), rng.randrange(256)))
        elif kind in ("u8", "u16"):
            ops.append((kind, rng.randrange(len(FIELD_OFFSETS)), rng.choice((*FIELD_VALUES, rng.randrange(1 << 16)))))
        elif kind == "sub":
            ops.append((kind, rng.randrange(len(FIELD_OFFSETS)), rng.choice((1, 4, 16, 28, rng.randrange(1, 256)))))
        elif kind == "fix":
            ops.append((kind, 0, 0))
        else:
            ops.append((kind, rng.choice((1, 100, 1500, JUMBO_BYTES)), rng.randrange(1 << 16)))
    return ops


def fuzz_frames(base: dict[str, bytes], count: int, seed: int) -> list[bytes]:
    """``count`` frames for a live fuzz: mutations of ``base``'s frames (one to four ``random_ops`` each), one in
    twenty raw random bytes of any size, and the extremes (0 bytes, a jumbo frame) first."""
    rng = random.Random(seed)
    names = sorted(base)
    out = [b"", mutate(base[names[0]], [("grow", JUMBO_BYTES, seed)])]
    while len(out) < count:
        if rng.randrange(20) == 0:
            out.append(rng.randbytes(rng.choice((rng.randrange(64), rng.randrange(JUMBO_BYTES + 1)))))
        else:
            out.append(mutate(base[rng.choice(names)], random_ops(rng)))
    return out[:count]
