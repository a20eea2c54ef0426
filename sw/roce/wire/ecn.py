"""ECN on RoCEv2 frames: read the codepoint, and mark Congestion Experienced the way a switch does.

Senders put ECT(0) on data (``sw.roce.wire.template``); a congested switch turns ECT into CE and a receiver that
sees CE answers with a CNP.  Marking rewrites only the IP ECN bits (and the IPv4 header checksum): the ICRC
masks the TOS/traffic class, so a marked frame still verifies, and CE once set is never cleared here.
"""

from __future__ import annotations

from sw.roce.wire.errors import NotRoceError, TruncatedFrameError
from sw.roce.wire.flow import ECN_CE, ECN_NOT_ECT

_ETH_P_IPV4 = b"\x08\x00"
_ETH_P_IPV6 = b"\x86\xdd"


def _ip_offset(frame: bytes | bytearray) -> int:
    if len(frame) < 14:
        raise TruncatedFrameError(f"frame of {len(frame)} bytes has no Ethernet header", len(frame))
    ethertype = bytes(frame[12:14])
    if ethertype in (_ETH_P_IPV4, _ETH_P_IPV6):
        return 14
    raise NotRoceError(f"EtherType 0x{ethertype.hex()} is neither IPv4 nor IPv6", 12)


def ecn_of(frame: bytes | bytearray) -> int:
    """The ECN codepoint (0 not-ECT, 1 ECT(1), 2 ECT(0), 3 CE) of an Ethernet/IP frame."""
    ip = _ip_offset(frame)
    if len(frame) < ip + 2:
        raise TruncatedFrameError("frame ends inside the IP header", len(frame))
    if frame[ip] >> 4 == 4:
        return frame[ip + 1] & 3
    return (frame[ip + 1] >> 4) & 3


def mark_ce(frame: bytes | bytearray) -> bytes:
    """The frame with ECN set to CE if it was ECN-capable (not-ECT frames are left alone, RFC 3168)."""
    ecn = ecn_of(frame)
    if ecn in (ECN_NOT_ECT, ECN_CE):
        return bytes(frame)
    out = bytearray(frame)
    ip = 14
    if out[ip] >> 4 == 4:
        if len(out) < ip + 20:
            raise TruncatedFrameError("frame ends inside the IPv4 header", len(out))
        old_word = out[ip] << 8 | out[ip + 1]
        out[ip + 1] |= ECN_CE
        new_word = out[ip] << 8 | out[ip + 1]
        # Incremental checksum update (RFC 1624, eqn. 3): HC' = ~(~HC + ~m + m').
        csum = int.from_bytes(out[ip + 10 : ip + 12], "big")
        total = (~csum & 0xFFFF) + (~old_word & 0xFFFF) + new_word
        total = (total & 0xFFFF) + (total >> 16)
        total = (total & 0xFFFF) + (total >> 16)
        out[ip + 10 : ip + 12] = (~total & 0xFFFF).to_bytes(2, "big")
    else:
        out[ip + 1] |= ECN_CE << 4
    return bytes(out)
