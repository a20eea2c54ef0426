"""RC transport constants and arithmetic from the IBTA spec: 24-bit PSNs, AETH syndromes, timer encodings.

Kept apart from the state machines so the requester, the responder and the tests share one definition.
"""

from __future__ import annotations

from sw.roce.wire.opcodes import Opcode

PSN_MASK = 0xFFFFFF
_PSN_HALF = 1 << 23

# AETH syndrome (IBTA 9.7.5.1.1): bits 7..5 the type, bits 4..0 credit count / RNR timer / NAK code.
SYN_ACK = 0x00
SYN_RNR = 0x20
SYN_NAK = 0x60
SYN_TYPE_MASK = 0xE0
CREDITS_INVALID = 0x1F  # "no end-to-end credits": the requester may send SENDs freely

NAK_PSN_SEQ_ERR = 0
NAK_INV_REQ = 1
NAK_REM_ACCESS_ERR = 2
NAK_REM_OP_ERR = 3

# RNR NAK timer field -> delay in ns (IBTA table 45; 0 encodes the longest delay).
RNR_TIMER_NS = (
    655_360_000,
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
)

PATH_MTUS = (256, 512, 1024, 2048, 4096)
RETRY_INFINITE = 7  # rnr_retry == 7 means retry for ever


def psn_add(psn: int, n: int) -> int:
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """Signed distance a - b in the 24-bit PSN space (-2^23 .. 2^23-1)."""
    return ((a - b + _PSN_HALF) & PSN_MASK) - _PSN_HALF


def ack_timeout_ns(timeout: int) -> int:
    """Local ACK timeout of QP attribute ``timeout`` (IBTA: 4.096 us * 2^timeout)."""
    if not 1 <= timeout <= 31:
        raise ValueError(f"timeout={timeout}: must be 1..31 (4.096 us * 2^timeout)")
    return 4096 << timeout


def n_packets(length: int, mtu: int) -> int:
    """Packets a message of ``length`` bytes takes at path MTU ``mtu`` (a zero-byte message takes one)."""
    return max(1, -(-length // mtu))


# Opcodes the requester side of a QP receives; everything else with a payload or RETH goes to the responder.
TO_REQUESTER = frozenset(
    {
        Opcode.ACKNOWLEDGE,
        Opcode.ATOMIC_ACKNOWLEDGE,
        Opcode.RDMA_READ_RESPONSE_FIRST,
        Opcode.RDMA_READ_RESPONSE_MIDDLE,
        Opcode.RDMA_READ_RESPONSE_LAST,
        Opcode.RDMA_READ_RESPONSE_ONLY,
    }
)

# (first, middle, last, only) opcodes of each message kind; index 1/2 of the tuple of "last"/"only" variants.
SEND_OPS = (Opcode.SEND_FIRST, Opcode.SEND_MIDDLE, Opcode.SEND_LAST, Opcode.SEND_ONLY)
SEND_IMM_OPS = (
    Opcode.SEND_FIRST,
    Opcode.SEND_MIDDLE,
    Opcode.SEND_LAST_WITH_IMMEDIATE,
    Opcode.SEND_ONLY_WITH_IMMEDIATE,
)
WRITE_OPS = (
    Opcode.RDMA_WRITE_FIRST,
    Opcode.RDMA_WRITE_MIDDLE,
    Opcode.RDMA_WRITE_LAST,
    Opcode.RDMA_WRITE_ONLY,
)
WRITE_IMM_OPS = (
    Opcode.RDMA_WRITE_FIRST,
    Opcode.RDMA_WRITE_MIDDLE,
    Opcode.RDMA_WRITE_LAST_WITH_IMMEDIATE,
    Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE,
)
READ_RESP_OPS = (
    Opcode.RDMA_READ_RESPONSE_FIRST,
    Opcode.RDMA_READ_RESPONSE_MIDDLE,
    Opcode.RDMA_READ_RESPONSE_LAST,
    Opcode.RDMA_READ_RESPONSE_ONLY,
)


def segment_opcode(ops: tuple[Opcode, Opcode, Opcode, Opcode], index: int, count: int) -> Opcode:
    """Opcode of packet ``index`` of ``count`` of a message: FIRST / MIDDLE / LAST or ONLY."""
    if count == 1:
        return ops[3]
    if index == 0:
        return ops[0]
    return ops[2] if index == count - 1 else ops[1]


# Classification of request opcodes for the responder.
SEND_FIRSTISH = frozenset({Opcode.SEND_FIRST, Opcode.SEND_ONLY, Opcode.SEND_ONLY_WITH_IMMEDIATE})
SEND_ANY = frozenset(SEND_OPS + SEND_IMM_OPS)
SEND_LASTISH = frozenset(
    {Opcode.SEND_LAST, Opcode.SEND_LAST_WITH_IMMEDIATE, Opcode.SEND_ONLY, Opcode.SEND_ONLY_WITH_IMMEDIATE}
)
WRITE_FIRSTISH = frozenset(
    {Opcode.RDMA_WRITE_FIRST, Opcode.RDMA_WRITE_ONLY, Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE}
)
WRITE_ANY = frozenset(WRITE_OPS + WRITE_IMM_OPS)
WRITE_LASTISH = frozenset(
    {
        Opcode.RDMA_WRITE_LAST,
        Opcode.RDMA_WRITE_LAST_WITH_IMMEDIATE,
        Opcode.RDMA_WRITE_ONLY,
        Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    }
)
WITH_IMM = frozenset(
    {
        Opcode.SEND_LAST_WITH_IMMEDIATE,
        Opcode.SEND_ONLY_WITH_IMMEDIATE,
        Opcode.RDMA_WRITE_LAST_WITH_IMMEDIATE,
        Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    }
)
