"""RC opcodes of the BTH and, for each, the extended headers that follow it (IBTA vol. 1, table 35).

Pure data shared by the Scapy layers, the fast template and the fast decoder, so all three agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Opcode(IntEnum):
    """BTH opcodes of the Reliable Connection transport, plus the RoCEv2 CNP."""

    SEND_FIRST = 0x00
    SEND_MIDDLE = 0x01
    SEND_LAST = 0x02
    SEND_LAST_WITH_IMMEDIATE = 0x03
    SEND_ONLY = 0x04
    SEND_ONLY_WITH_IMMEDIATE = 0x05
    RDMA_WRITE_FIRST = 0x06
    RDMA_WRITE_MIDDLE = 0x07
    RDMA_WRITE_LAST = 0x08
    RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09
    RDMA_WRITE_ONLY = 0x0A
    RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B
    RDMA_READ_REQUEST = 0x0C
    RDMA_READ_RESPONSE_FIRST = 0x0D
    RDMA_READ_RESPONSE_MIDDLE = 0x0E
    RDMA_READ_RESPONSE_LAST = 0x0F
    RDMA_READ_RESPONSE_ONLY = 0x10
    ACKNOWLEDGE = 0x11
    ATOMIC_ACKNOWLEDGE = 0x12
    COMPARE_SWAP = 0x13
    FETCH_ADD = 0x14
    CNP = 0x81


# Extended-header sizes in bytes.
HEADER_BYTES = {"RETH": 16, "ImmDt": 4, "AETH": 4, "AtomicETH": 28, "AtomicAckETH": 8, "CNPPadding": 16}
BTH_BYTES = 12
ROCEV2_UDP_DPORT = 4791  # IANA port of RoCEv2
ICRC_BYTES = 4


@dataclass(frozen=True)
class OpcodeLayout:
    """What follows the BTH of one opcode: extended headers in wire order; may a payload follow."""

    headers: tuple[str, ...]
    has_payload: bool

    @property
    def ext_bytes(self) -> int:
        return sum(HEADER_BYTES[h] for h in self.headers)


_P, _N = True, False
LAYOUTS: dict[Opcode, OpcodeLayout] = {
    Opcode.SEND_FIRST: OpcodeLayout((), _P),
    Opcode.SEND_MIDDLE: OpcodeLayout((), _P),
    Opcode.SEND_LAST: OpcodeLayout((), _P),
    Opcode.SEND_LAST_WITH_IMMEDIATE: OpcodeLayout(("ImmDt",), _P),
    Opcode.SEND_ONLY: OpcodeLayout((), _P),
    Opcode.SEND_ONLY_WITH_IMMEDIATE: OpcodeLayout(("ImmDt",), _P),
    Opcode.RDMA_WRITE_FIRST: OpcodeLayout(("RETH",), _P),
    Opcode.RDMA_WRITE_MIDDLE: OpcodeLayout((), _P),
    Opcode.RDMA_WRITE_LAST: OpcodeLayout((), _P),
    Opcode.RDMA_WRITE_LAST_WITH_IMMEDIATE: OpcodeLayout(("ImmDt",), _P),
    Opcode.RDMA_WRITE_ONLY: OpcodeLayout(("RETH",), _P),
    Opcode.RDMA_WRITE_ONLY_WITH_IMMEDIATE: OpcodeLayout(("RETH", "ImmDt"), _P),
    Opcode.RDMA_READ_REQUEST: OpcodeLayout(("RETH",), _N),
    Opcode.RDMA_READ_RESPONSE_FIRST: OpcodeLayout(("AETH",), _P),
    Opcode.RDMA_READ_RESPONSE_MIDDLE: OpcodeLayout((), _P),
    Opcode.RDMA_READ_RESPONSE_LAST: OpcodeLayout(("AETH",), _P),
    Opcode.RDMA_READ_RESPONSE_ONLY: OpcodeLayout(("AETH",), _P),
    Opcode.ACKNOWLEDGE: OpcodeLayout(("AETH",), _N),
    Opcode.ATOMIC_ACKNOWLEDGE: OpcodeLayout(("AETH", "AtomicAckETH"), _N),
    Opcode.COMPARE_SWAP: OpcodeLayout(("AtomicETH",), _N),
    Opcode.FETCH_ADD: OpcodeLayout(("AtomicETH",), _N),
    Opcode.CNP: OpcodeLayout(("CNPPadding",), _N),
}

# Opcode -> tuple of extended headers, indexed by the raw byte for the decoder's hot path (None = unknown).
LAYOUT_BY_BYTE: list[OpcodeLayout | None] = [
    LAYOUTS.get(Opcode(b)) if b in Opcode._value2member_map_ else None for b in range(256)
]
