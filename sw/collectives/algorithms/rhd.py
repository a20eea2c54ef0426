"""Recursive halving-doubling (Rabenseifner): log2(n) steps each way, for latency-bound sizes.

Allreduce works for any n: the first 2r ranks (r = n - largest power of two) fold pairwise into r ranks
before, and unfold after.  Reducescatter (recursive halving) and allgather (recursive doubling) need a
power-of-two group; the tuner does not offer them otherwise.
"""

from __future__ import annotations

import numpy as np

from ..errors import CollectiveUserError
from ..router import Net
from .common import Reduce, segment_bounds

Plan = list[tuple[int, tuple[int, int], tuple[int, int]]]


def halving_plan(q: int, pof2: int) -> Plan:
    """(partner, kept blocks, sent blocks) per halving step of virtual rank ``q``; q ends owning block q."""
    plan, lo, hi, mask = [], 0, pof2, pof2 >> 1
    while mask:
        partner, mid = q ^ mask, (lo + hi) // 2
        keep, send = ((lo, mid), (mid, hi)) if q < partner else ((mid, hi), (lo, mid))
        plan.append((partner, keep, send))
        lo, hi = keep
        mask >>= 1
    return plan


def fold_survivors(n: int) -> list[int]:
    """Positions (of ``n``) that run the power-of-two core after the fold, in virtual-rank order: the odd one of
    each of the first ``n - pof2`` pairs, then everyone above them."""
    pof2 = 1 << (n.bit_length() - 1)
    rem = n - pof2
    return [2 * v + 1 if v < rem else v + rem for v in range(pof2)]


def _span(bounds: list[tuple[int, int]], blocks: tuple[int, int]) -> slice:
    return slice(bounds[blocks[0]][0], bounds[blocks[1] - 1][1])


def _halve(net: Net, ranks: list[int], plan: Plan, bounds: list[tuple[int, int]], x: np.ndarray,
           reduce: Reduce) -> None:
    tmp = np.empty_like(x)
    for partner, keep, send in plan:
        k, s = _span(bounds, keep), _span(bounds, send)
        net.waitall([net.irecv(ranks[partner], tmp[k]), net.isend(ranks[partner], x[s])])
        reduce(x[k], tmp[k])


def _double(net: Net, ranks: list[int], plan: Plan, bounds: list[tuple[int, int]], x: np.ndarray) -> None:
    for partner, keep, send in reversed(plan):
        net.waitall([net.irecv(ranks[partner], x[_span(bounds, send)]),
                     net.isend(ranks[partner], x[_span(bounds, keep)])])


def rhd_allreduce(net: Net, group: list[int], x: np.ndarray, reduce: Reduce) -> None:
    n = len(group)
    if n == 1:
        return
    p = group.index(net.rank)
    pof2 = 1 << (n.bit_length() - 1)
    rem = n - pof2
    folded = p < 2 * rem
    if folded and p % 2 == 0:
        net.waitall([net.isend(group[p + 1], x)])
        net.wait(net.irecv(group[p + 1], x))
        return
    if folded:
        tmp = np.empty_like(x)
        net.wait(net.irecv(group[p - 1], tmp))
        reduce(x, tmp)
    q = p // 2 if folded else p - rem
    ranks = [group[i] for i in fold_survivors(n)]
    bounds = segment_bounds(len(x), pof2)
    plan = halving_plan(q, pof2)
    _halve(net, ranks, plan, bounds, x, reduce)
    _double(net, ranks, plan, bounds, x)
    if folded:
        net.waitall([net.isend(group[p - 1], x)])


def _pof2_or_error(n: int, what: str) -> None:
    if n & (n - 1):
        raise CollectiveUserError(f"algorithm 'rhd' for {what} needs a power-of-two number of ranks, not {n} "
                                  "(use 'ring')")


def rhd_reducescatter(net: Net, group: list[int], x: np.ndarray, reduce: Reduce) -> None:
    """Recursive halving over the full buffer ``x``; position p ends with segment p of n reduced."""
    _pof2_or_error(len(group), "reducescatter")
    if len(group) > 1:
        _halve(net, group, halving_plan(group.index(net.rank), len(group)), segment_bounds(len(x), len(group)),
               x, reduce)


def rhd_allgather(net: Net, group: list[int], x: np.ndarray) -> None:
    """Recursive doubling over ``x`` whose segment p (of n) holds position p's data on entry."""
    _pof2_or_error(len(group), "allgather")
    if len(group) > 1:
        _double(net, group, halving_plan(group.index(net.rank), len(group)), segment_bounds(len(x), len(group)), x)
