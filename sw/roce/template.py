"""Fast path: a RoCEv2 frame template built once with Scapy, then patched per packet with ``struct``.

Per packet only the variable fields are packed (PSN, dest QP, ack-request/solicited bits, ECN, payload and
its length and padding, the opcode's extended-header fields) and the ICRC is computed incrementally: the CRC
state over the invariant masked prefix (8 bytes of 1s + the first IP bytes) is computed once, per packet
zlib.crc32 continues over the masked variable headers and the payload.  IP total length, IPv4 checksum
(incrementally, from a precomputed sum) and UDP length are patched.  The UDP checksum is 0 over IPv4 (as
RoCEv2 NICs send it: the ICRC protects the packet) and computed over IPv6, where RFC 8200 requires it.  The
output is byte-identical to ``sw.roce.packets.scapy_frame`` (a property test checks every opcode).

Usage (the transport calls this per packet on an AF_PACKET socket)::

    tpl = FlowTemplates(flow)                       # once per connection direction
    frame = tpl[Opcode.RDMA_WRITE_ONLY].build(psn, payload, va=addr, rkey=key, dma_len=len(payload))
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from sw.roce.flow import ECN_ECT0, Flow
from sw.roce.icrc import PSEUDO_LRH
from sw.roce.opcodes import BTH_BYTES, ICRC_BYTES, LAYOUTS, Opcode
from sw.roce.packets import scapy_frame

_PADS = (b"", b"\0", b"\0\0", b"\0\0\0")
_ICRC = struct.Struct("<I")
_ETH_BYTES = 14
_UDP_BYTES = 8

# Extended-header layouts -> (struct format of their fields, kind code used by ``build``).
_EXT_FORMATS: dict[tuple[str, ...], tuple[str, int]] = {
    (): ("", 0),
    ("RETH",): ("QII", 1),
    ("ImmDt",): ("I", 2),
    ("RETH", "ImmDt"): ("QIII", 3),
    ("AETH",): ("I", 4),
    ("AETH", "AtomicAckETH"): ("IQ", 5),
    ("AtomicETH",): ("QIQQ", 6),
    ("CNPPadding",): ("16x", 0),
}


def _ones_sum(data: bytes) -> int:
    """Sum of the big-endian 16-bit words of ``data`` (even length), not yet folded."""
    return sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))


class PacketTemplate:
    """One opcode of one flow: ``build(psn, payload, ...)`` returns a complete frame (no FCS) as bytes."""

    def __init__(self, flow: Flow, opcode: Opcode | int) -> None:
        self.flow = flow
        self.opcode = Opcode(opcode)
        layout = LAYOUTS[self.opcode]
        self.has_payload = layout.has_payload
        ext_fmt, self._kind = _EXT_FORMATS[layout.headers]
        self._ext_bytes = layout.ext_bytes
        # Built once with Scapy: every invariant byte below is taken from this reference frame.
        ref = scapy_frame(flow, self.opcode, psn=0, payload=b"", ecn=0)
        self._dqpn = flow.dst_qpn
        self._udp_fixed = _UDP_BYTES + BTH_BYTES + self._ext_bytes + ICRC_BYTES  # UDP length sans payload
        if flow.ip_version == 4:
            self._init_v4(ref, ext_fmt)
            self.build = self._build_v4  # type: ignore[method-assign]
        else:
            self._init_v6(ref, ext_fmt)
            self.build = self._build_v6  # type: ignore[method-assign]
        l4 = self._l4
        # BTH word 0 (opcode | SE,M,PadCnt,TVer | P_Key) with SE and PadCnt cleared: they vary per packet.
        self._w0 = int.from_bytes(ref[l4 + 8 : l4 + 12], "big") & ~(0xB << 20)
        self._resv8a = ref[l4 + 12] << 24  # BECN set on CNPs

    # --- set-up ------------------------------------------------------------------------------------------
    def _init_v4(self, ref: bytes, ext_fmt: str) -> None:
        if ref[14] != 0x45:
            raise ValueError("the IPv4 template assumes a 20-byte header without options")
        self._l4 = _ETH_BYTES + 20
        # wire: eth+ver/ihl, tos, totlen, id..frag, ttl+proto, cksum, addrs+ports, udplen, udpck, BTH, ext
        self._wire = struct.Struct(f">15sBH4s2sH12sHH3I{ext_fmt}")
        self._c_eth = ref[0:15]
        self._c_id, self._c_ttlproto = ref[18:22], ref[22:24]
        self._c_addrports = ref[26:38]
        # masked (ICRC): after the precomputed state over 1s(8) + ver/ihl + 0xff(TOS)
        self._masked = struct.Struct(f">H20sH2s3I{ext_fmt}")
        self._m_mid = ref[18:22] + b"\xff" + ref[23:24] + b"\xff\xff" + ref[26:38]
        self._crc0 = zlib.crc32(PSEUDO_LRH + bytes((ref[14], 0xFF)))
        # IPv4 checksum: sum of all header words but TOS/ver word, total length and checksum itself.
        hdr = bytearray(ref[14:34])
        hdr[0:4] = b"\0\0\0\0"
        hdr[10:12] = b"\0\0"
        fixed = _ones_sum(bytes(hdr))
        dscp = self.flow.cnp_dscp if self.opcode == Opcode.CNP else self.flow.dscp
        self._ecn = {ecn: (dscp << 2 | ecn, fixed + (ref[14] << 8 | dscp << 2 | ecn)) for ecn in range(4)}

    def _init_v6(self, ref: bytes, ext_fmt: str) -> None:
        self._l4 = _ETH_BYTES + 40
        # wire: eth | ver/tc/flow label | payload length | nh,hlim,addrs,ports | udplen | udpck | BTH | ext
        self._wire = struct.Struct(f">14sIH38sHH3I{ext_fmt}")
        self._c_eth = ref[0:14]
        self._c_rest = ref[20:58]
        self._masked = struct.Struct(f">H38sH2s3I{ext_fmt}")
        self._m_mid = ref[20:21] + b"\xff" + ref[22:58]
        self._crc0 = zlib.crc32(PSEUDO_LRH + bytes((ref[14] | 0x0F, 0xFF, 0xFF, 0xFF)))
        word0 = int.from_bytes(ref[14:18], "big") & 0xF00FFFFF
        dscp = self.flow.cnp_dscp if self.opcode == Opcode.CNP else self.flow.dscp
        self._ecn = {ecn: (word0 | (dscp << 2 | ecn) << 20, 0) for ecn in range(4)}
        # UDP checksum constant part: pseudo-header addresses and next header, and the two ports.
        self._csum0 = _ones_sum(ref[22:54]) + 17 + _ones_sum(ref[54:58])

    # --- per packet ----------------------------------------------------------------------------------------
    def _ext(
        self,
        va: int,
        rkey: int,
        dma_len: int,
        immdt: int,
        syndrome: int,
        msn: int,
        swapdt: int,
        cmpdt: int,
        orig_rem_dt: int,
    ) -> tuple[int, ...]:
        kind = self._kind
        if kind == 0:
            return ()
        if kind == 1:
            return (va, rkey, dma_len)
        if kind == 2:
            return (immdt,)
        if kind == 3:
            return (va, rkey, dma_len, immdt)
        if msn >> 24 or syndrome >> 8:
            raise ValueError(f"syndrome={syndrome} / msn={msn}: must fit in 8 / 24 bits")
        if kind == 4:
            return (syndrome << 24 | msn,)
        if kind == 5:
            return (syndrome << 24 | msn, orig_rem_dt)
        return (va, rkey, swapdt, cmpdt)

    def _check(self, psn: int, dqpn: int, n: int) -> None:
        if (psn | dqpn) >> 24 or psn < 0 or dqpn < 0:
            raise ValueError(f"psn={psn} / dqpn={dqpn}: must fit in 24 bits")
        if n and not self.has_payload:
            raise ValueError(f"{self.opcode.name} carries no payload (got {n} bytes)")

    def _build_v4(
        self,
        psn: int,
        payload: bytes | bytearray | memoryview = b"",
        ecn: int = ECN_ECT0,
        ackreq: bool = False,
        se: bool = False,
        dqpn: int | None = None,
        *,
        va: int = 0,
        rkey: int = 0,
        dma_len: int = 0,
        immdt: int = 0,
        syndrome: int = 0,
        msn: int = 0,
        swapdt: int = 0,
        cmpdt: int = 0,
        orig_rem_dt: int = 0,
    ) -> bytes:
        n = len(payload)
        if dqpn is None:
            dqpn = self._dqpn
        self._check(psn, dqpn, n)
        try:
            tos, csum = self._ecn[ecn]
        except KeyError:
            raise ValueError(f"ecn={ecn!r}: must be 0..3") from None
        pad = -n & 3
        udp_len = self._udp_fixed + n + pad
        tot_len = udp_len + 20
        csum += tot_len
        csum = (csum & 0xFFFF) + (csum >> 16)
        csum = ((csum & 0xFFFF) + (csum >> 16)) ^ 0xFFFF
        w0 = self._w0 | se << 23 | pad << 20
        w2 = ackreq << 31 | psn
        ext = self._ext(va, rkey, dma_len, immdt, syndrome, msn, swapdt, cmpdt, orig_rem_dt) if self._kind else ()
        hdr = self._wire.pack(
            self._c_eth,
            tos,
            tot_len,
            self._c_id,
            self._c_ttlproto,
            csum,
            self._c_addrports,
            udp_len,
            0,
            w0,
            self._resv8a | dqpn,
            w2,
            *ext,
        )
        crc = zlib.crc32(
            self._masked.pack(tot_len, self._m_mid, udp_len, b"\xff\xff", w0, 0xFF000000 | dqpn, w2, *ext),
            self._crc0,
        )
        if n:
            crc = zlib.crc32(payload, crc)
        if pad:
            crc = zlib.crc32(_PADS[pad], crc)
            return hdr + payload + _PADS[pad] + _ICRC.pack(crc)
        return hdr + payload + _ICRC.pack(crc)

    def _build_v6(
        self,
        psn: int,
        payload: bytes | bytearray | memoryview = b"",
        ecn: int = ECN_ECT0,
        ackreq: bool = False,
        se: bool = False,
        dqpn: int | None = None,
        *,
        va: int = 0,
        rkey: int = 0,
        dma_len: int = 0,
        immdt: int = 0,
        syndrome: int = 0,
        msn: int = 0,
        swapdt: int = 0,
        cmpdt: int = 0,
        orig_rem_dt: int = 0,
    ) -> bytes:
        n = len(payload)
        if dqpn is None:
            dqpn = self._dqpn
        self._check(psn, dqpn, n)
        try:
            word0, _ = self._ecn[ecn]
        except KeyError:
            raise ValueError(f"ecn={ecn!r}: must be 0..3") from None
        pad = -n & 3
        udp_len = self._udp_fixed + n + pad
        w0 = self._w0 | se << 23 | pad << 20
        w2 = ackreq << 31 | psn
        ext = self._ext(va, rkey, dma_len, immdt, syndrome, msn, swapdt, cmpdt, orig_rem_dt) if self._kind else ()
        w1 = self._resv8a | dqpn
        crc = zlib.crc32(
            self._masked.pack(udp_len, self._m_mid, udp_len, b"\xff\xff", w0, 0xFF000000 | dqpn, w2, *ext),
            self._crc0,
        )
        if n:
            crc = zlib.crc32(payload, crc)
        if pad:
            crc = zlib.crc32(_PADS[pad], crc)
        icrc = _ICRC.pack(crc)
        # UDP checksum (mandatory over IPv6).  Since 2**16 == 1 (mod 0xFFFF), a big-endian value of any
        # even-length run of bytes is congruent to the sum of its 16-bit words: whole words and the payload
        # are summed as integers and reduced once.
        total = (
            self._csum0
            + 2 * udp_len
            + w0
            + w1
            + w2
            + sum(ext)
            + int.from_bytes(icrc, "big")
            + (int.from_bytes(payload, "big") << 8 * pad)
        ) % 0xFFFF
        csum = total ^ 0xFFFF if total else 0xFFFF
        hdr = self._wire.pack(self._c_eth, word0, udp_len, self._c_rest, udp_len, csum, w0, w1, w2, *ext)
        if pad:
            return hdr + payload + _PADS[pad] + icrc
        return hdr + payload + icrc

    build = _build_v4  # replaced per instance by the IP version's builder in __init__


class FlowTemplates:
    """The templates of every opcode for one flow, built lazily on first use: ``tpl[Opcode.X].build(...)``."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self._by_opcode: dict[int, PacketTemplate] = {}

    def __getitem__(self, opcode: Opcode | int) -> PacketTemplate:
        tpl = self._by_opcode.get(opcode)
        if tpl is None:
            tpl = self._by_opcode[int(opcode)] = PacketTemplate(self.flow, opcode)
        return tpl

    def build(
        self,
        opcode: Opcode | int,
        psn: int,
        payload: bytes | bytearray | memoryview = b"",
        **fields: int | bool | None,
    ) -> bytes:
        """Convenience form of ``self[opcode].build(psn, payload, **fields)``."""
        return self[opcode].build(psn, payload, **fields)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[PacketTemplate]:
        return (self[op] for op in LAYOUTS)
