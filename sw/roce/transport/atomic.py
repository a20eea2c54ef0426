"""Responder side of IBTA atomics: execute compare-and-swap / fetch-and-add on 8 aligned bytes of an MR, and
the atomic replay cache that answers a retransmitted atomic request with the saved result instead of running
it twice (IBTA 9.4.5 / 9.7.5.1.2: responder resources keep the results of the most recent atomics).

Memory is the host's: the 64-bit word is read and written in native byte order (what a numpy uint64 view of
the buffer shows), while the wire carries big-endian AtomicETH/AtomicAckETH fields.  One process-wide lock
makes every atomic indivisible with respect to any other atomic of this process (other QPs, other NICs driven
from other threads, overlapping registrations of one buffer).
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict

from sw.roce.transport.verbs import ATOMIC_BYTES, MemoryRegion
from sw.roce.wire.opcodes import Opcode

U64_MASK = (1 << 64) - 1
_LOCK = threading.Lock()
_BYTEORDER = sys.byteorder


def execute(mr: MemoryRegion, off: int, opcode: int, swapdt: int, cmpdt: int) -> int:
    """Run one atomic at buffer offset ``off`` (bounds and alignment already checked); return the old value."""
    view = mr.view
    with _LOCK:
        orig = int.from_bytes(view[off : off + ATOMIC_BYTES], _BYTEORDER)
        if opcode == Opcode.FETCH_ADD:
            new = (orig + swapdt) & U64_MASK
        elif orig == cmpdt:
            new = swapdt
        else:
            return orig
        view[off : off + ATOMIC_BYTES] = new.to_bytes(ATOMIC_BYTES, _BYTEORDER)
    return orig


def to_local_bytes(value: int) -> bytes:
    """The original value as the requester's 8-byte local SGE receives it (native byte order)."""
    return (value & U64_MASK).to_bytes(ATOMIC_BYTES, _BYTEORDER)


class AtomicReplayCache:
    """Results of the last ``depth`` atomics by request PSN, oldest evicted first."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self._by_psn: OrderedDict[int, tuple[int, int]] = OrderedDict()

    def save(self, psn: int, orig: int, msn: int) -> None:
        self._by_psn[psn] = (orig, msn)
        self._by_psn.move_to_end(psn)
        while len(self._by_psn) > self.depth:
            self._by_psn.popitem(last=False)

    def lookup(self, psn: int) -> tuple[int, int] | None:
        """(original value, MSN) saved for the atomic at ``psn``, or None if it is not (or no longer) cached."""
        return self._by_psn.get(psn)

    def __len__(self) -> int:
        return len(self._by_psn)
