"""Helpers shared by the schedules: contiguous segments and pipeline chunks of a flat buffer."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Reduce = Callable[[np.ndarray, np.ndarray], None]
"""``reduce(dst, src)``: dst = dst (op) src, elementwise, in place."""


def segment_bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """Split ``count`` elements into ``parts`` contiguous near-equal segments (the first ones one longer)."""
    base, extra = divmod(count, parts)
    bounds, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def chunk_ranges(lo: int, hi: int, chunk_elems: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into pipeline chunks of at most ``chunk_elems`` elements (none if empty)."""
    step = max(1, chunk_elems)
    return [(a, min(a + step, hi)) for a in range(lo, hi, step)]
