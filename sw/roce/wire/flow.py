"""One RC connection's addressing as the sender sees it, and the QP-pair hash that picks its UDP source port.

RoCEv2 carries no L4 connection identity in the UDP source port, so NICs use it for ECMP entropy: Linux
(``rdma_calc_flow_label`` / ``rdma_flow_label_to_udp_sport`` in include/rdma/ib_verbs.h) folds the product of
the two QP numbers into a 20-bit flow label, then folds that into 14 bits under 0xC000.  We use the same
documented hash, so both ends of a QP pair (the product is symmetric) and a real NIC pick the same port.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

ROCE_SPORT_MIN = 0xC000
FLOW_LABEL_MASK = 0xFFFFF

# ECN codepoints of the IP TOS / traffic-class low two bits (RFC 3168).
ECN_NOT_ECT = 0
ECN_ECT1 = 1
ECN_ECT0 = 2
ECN_CE = 3

DSCP_ROCE_DEFAULT = 26  # the usual lossless RoCE class
DSCP_CNP_DEFAULT = 48  # CNPs ride a strict-priority class so congestion feedback is not itself queued


def flow_label(lqpn: int, rqpn: int) -> int:
    """20-bit flow label of a QP pair: the 48-bit product folded at 20 and 40 bits (symmetric in the pair)."""
    v = (lqpn & 0xFFFFFF) * (rqpn & 0xFFFFFF)
    v ^= v >> 20
    v ^= v >> 40
    return v & FLOW_LABEL_MASK


def udp_sport(lqpn: int, rqpn: int) -> int:
    """UDP source port for a QP pair: the flow label folded to 14 bits, in 0xC000..0xFFFF."""
    fl = flow_label(lqpn, rqpn)
    low = (fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14)
    return low | ROCE_SPORT_MIN


def _mac_bytes(mac: str) -> bytes:
    parts = mac.split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise ValueError(f"MAC address {mac!r}: expected six hex pairs like 02:00:00:00:00:01")
    try:
        return bytes(int(p, 16) for p in parts)
    except ValueError:
        raise ValueError(f"MAC address {mac!r}: expected six hex pairs like 02:00:00:00:00:01") from None


@dataclass(frozen=True)
class Flow:
    """Addresses and header constants of one direction of an RC connection (sender's view)."""

    src_mac: str
    dst_mac: str
    src_ip: str
    dst_ip: str
    src_qpn: int
    dst_qpn: int
    pkey: int = 0xFFFF
    dscp: int = DSCP_ROCE_DEFAULT
    cnp_dscp: int = DSCP_CNP_DEFAULT
    ttl: int = 64
    migreq: int = 0
    sport: int | None = None  # None: derived from the QP pair by ``udp_sport``
    ip_version: int = field(init=False)

    def __post_init__(self) -> None:
        src = ipaddress.ip_address(self.src_ip)
        dst = ipaddress.ip_address(self.dst_ip)
        if src.version != dst.version:
            raise ValueError(f"src_ip {self.src_ip} and dst_ip {self.dst_ip} are different IP versions")
        _mac_bytes(self.src_mac)
        _mac_bytes(self.dst_mac)
        for name, value, bits in (
            ("src_qpn", self.src_qpn, 24),
            ("dst_qpn", self.dst_qpn, 24),
            ("pkey", self.pkey, 16),
            ("dscp", self.dscp, 6),
            ("cnp_dscp", self.cnp_dscp, 6),
            ("ttl", self.ttl, 8),
            ("migreq", self.migreq, 1),
        ):
            if not 0 <= value < (1 << bits):
                raise ValueError(f"{name}={value}: must fit in {bits} bits (0..{(1 << bits) - 1})")
        if self.sport is not None and not 0 <= self.sport <= 0xFFFF:
            raise ValueError(f"sport={self.sport}: must be a UDP port 0..65535")
        object.__setattr__(self, "ip_version", src.version)

    @property
    def udp_sport(self) -> int:
        """The UDP source port: ``sport`` if set, else derived from the QP pair (ECMP entropy)."""
        return udp_sport(self.src_qpn, self.dst_qpn) if self.sport is None else self.sport

    @property
    def flow_label(self) -> int:
        """IPv6 flow label (same QP-pair hash as the UDP source port)."""
        return flow_label(self.src_qpn, self.dst_qpn)

    @property
    def src_mac_bytes(self) -> bytes:
        """``src_mac`` as 6 bytes."""
        return _mac_bytes(self.src_mac)

    @property
    def dst_mac_bytes(self) -> bytes:
        """``dst_mac`` as 6 bytes."""
        return _mac_bytes(self.dst_mac)

    def reversed(self) -> Flow:
        """The same connection seen from the other end (for ACKs, read responses, CNPs)."""
        return Flow(
            self.dst_mac,
            self.src_mac,
            self.dst_ip,
            self.src_ip,
            self.dst_qpn,
            self.src_qpn,
            pkey=self.pkey,
            dscp=self.dscp,
            cnp_dscp=self.cnp_dscp,
            ttl=self.ttl,
            migreq=self.migreq,
            sport=self.sport,
        )
