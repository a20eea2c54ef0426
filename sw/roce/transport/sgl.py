"""Scatter/gather lists resolved against a protection domain: a message is the concatenation of its SGEs, in
order.  Senders gather a packet's byte range from them, receivers scatter a packet's payload into them.

Keys, bounds and access are checked per SGE when the work request is posted (VerbsError naming the SGE); an
MR deregistered after that is caught when its bytes are moved (LocalProtectionError, which the transport turns
into a LOC_PROT_ERR completion, as an HCA's DMA check would).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from sw.roce.transport.verbs import Access, MemoryRegion, ProtectionDomain, Sge, VerbsError


class LocalProtectionError(Exception):
    """A segment's MR was deregistered after the work request was posted."""


class SgList:
    """Segments (MR, offset in its buffer, length) of one work request; ``length`` bytes in all."""

    __slots__ = ("mrs", "offs", "lens", "ends", "length")

    def __init__(self, segments: Sequence[tuple[MemoryRegion, int, int]]) -> None:
        self.mrs = [s[0] for s in segments]
        self.offs = [s[1] for s in segments]
        self.lens = [s[2] for s in segments]
        self.ends: list[int] = []
        total = 0
        for n in self.lens:
            total += n
            self.ends.append(total)
        self.length = total

    @classmethod
    def single(cls, mr: MemoryRegion, off: int, length: int) -> SgList:
        return cls([(mr, off, length)])

    def _check(self, i: int) -> MemoryRegion:
        mr = self.mrs[i]
        if not mr.registered:
            raise LocalProtectionError(f"sge[{i}]: MR {mr.lkey:#x} was deregistered")
        return mr

    def gather(self, start: int, end: int) -> memoryview | bytes:
        """Bytes ``[start, end)`` of the message (a view when they lie in one segment)."""
        if start >= end:
            return b""
        if len(self.mrs) == 1:  # the common single-SGE case: a view, no search
            off = self.offs[0] + start
            return self._check(0).view[off : off + end - start]
        i = bisect_right(self.ends, start)
        base = self.ends[i] - self.lens[i]
        if end <= self.ends[i]:
            off = self.offs[i] + start - base
            return self._check(i).view[off : off + end - start]
        parts = []
        pos = start
        while pos < end:
            seg_end = self.ends[i]
            take = min(end, seg_end) - pos
            off = self.offs[i] + pos - (seg_end - self.lens[i])
            parts.append(self._check(i).view[off : off + take])
            pos += take
            i += 1
        return b"".join(parts)

    def scatter(self, start: int, data: bytes | memoryview) -> None:
        """Place ``data`` at message offset ``start`` (the caller checked it fits in ``length``)."""
        n = len(data)
        if not n:
            return
        if len(self.mrs) == 1:
            off = self.offs[0] + start
            self._check(0).view[off : off + n] = data
            return
        i = bisect_right(self.ends, start)
        pos, done = start, 0
        while done < n:
            seg_end = self.ends[i]
            take = min(n - done, seg_end - pos)
            off = self.offs[i] + pos - (seg_end - self.lens[i])
            self._check(i).view[off : off + take] = data[done : done + take]
            pos += take
            done += take
            i += 1


def resolve(
    pd: ProtectionDomain, sges: Sequence[Sge], need: Access, *, max_sge: int, what: str, cap_name: str
) -> SgList:
    """Check every SGE's lkey, bounds and ``need`` access (VerbsError naming the SGE) and resolve them."""
    if len(sges) > max_sge:
        raise VerbsError(f"{what}: {len(sges)} SGEs exceed the QP's {cap_name}={max_sge}")
    segments = []
    for i, sge in enumerate(sges):
        if not isinstance(sge, Sge):
            raise VerbsError(f"{what} sge[{i}]: expected an Sge (mr.sge(offset, length)), got {type(sge).__name__}")
        mr = pd.by_lkey(sge.lkey)
        if mr is None:
            raise VerbsError(f"{what} sge[{i}]: unknown lkey {sge.lkey:#x}")
        segments.append((mr, mr.offset(sge.addr, sge.length, need, what=f"{what} sge[{i}]"), sge.length))
    return SgList(segments)
