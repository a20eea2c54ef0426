"""The extended transport headers' fields (RETH, ImmDt, AETH, AtomicETH, AtomicAckETH): one typed argument set
for every RoCEv2 builder (``scapy_packet``/``scapy_frame`` and the fast templates)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HeaderFields:
    """Field values of the extended headers; a builder reads the ones its opcode carries and ignores the rest."""

    va: int = 0              # RETH / AtomicETH virtual address
    rkey: int = 0            # RETH / AtomicETH remote key
    dma_len: int = 0         # RETH DMA length
    immdt: int = 0           # ImmDt immediate data
    syndrome: int = 0        # AETH syndrome (8 bits)
    msn: int = 0             # AETH message sequence number (24 bits)
    swapdt: int = 0          # AtomicETH swap (or add) data
    cmpdt: int = 0           # AtomicETH compare data
    orig_rem_dt: int = 0     # AtomicAckETH original remote data


NO_FIELDS = HeaderFields()
# The ``HeaderFields`` names each extended header carries (what a decoder fills for that header).
FIELDS_OF_HEADER: dict[str, tuple[str, ...]] = {
    "RETH": ("va", "rkey", "dma_len"),
    "ImmDt": ("immdt",),
    "AETH": ("syndrome", "msn"),
    "AtomicETH": ("va", "rkey", "swapdt", "cmpdt"),
    "AtomicAckETH": ("orig_rem_dt",),
    "CNPPadding": (),
}
