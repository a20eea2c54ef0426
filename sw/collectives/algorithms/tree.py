"""Tree schedules: pipelined binary trees for broadcast/reduce and a double binary tree for allreduce.

Trees are heap-shaped over positions (node q has children 2q+1 and 2q+2).  The allreduce splits the buffer
in two halves and runs one half over the tree on positions p and the other over the mirrored positions
n-1-p, so the ranks that are inner nodes of one tree are leaves of the other and every rank's links carry
about the same load (the idea behind NCCL's double binary tree).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..router import Net
from ..transport.base import Request
from .common import Reduce, chunk_ranges


def heap_links(q: int, n: int) -> tuple[int | None, list[int]]:
    """(parent, children) of heap node ``q`` in a tree of ``n`` nodes."""
    parent = (q - 1) // 2 if q > 0 else None
    return parent, [c for c in (2 * q + 1, 2 * q + 2) if c < n]


def mirrored(q: int, n: int) -> int:
    """Position of heap node ``q`` in the double binary tree's second tree (the first one mirrored)."""
    return n - 1 - q


class _Tree:
    """One tree over ``group``: node id = f(position); rank of node, parent rank and children ranks of us."""

    def __init__(self, group: list[int], rank: int, node_of_pos: Callable[[int], int],
                 pos_of_node: Callable[[int], int]) -> None:
        n = len(group)
        parent, children = heap_links(node_of_pos(group.index(rank)), n)
        self.parent = group[pos_of_node(parent)] if parent is not None else None
        self.children = [group[pos_of_node(c)] for c in children]


def rooted_tree(group: list[int], rank: int, root: int) -> _Tree:
    n, r0 = len(group), group.index(root)
    return _Tree(group, rank, lambda p: (p - r0) % n, lambda q: (q + r0) % n)


def _up(net: Net, parts: list[tuple[_Tree, list[tuple[int, int]]]], x: np.ndarray, reduce: Reduce) -> None:
    """Reduce phase: every chunk of every tree flows from the leaves to the root, reduced on the way."""
    order = [(t, c) for c in range(max((len(ch) for _, ch in parts), default=0))
             for t in range(len(parts)) if c < len(parts[t][1])]
    nkids = max((len(tree.children) for tree, _ in parts), default=0)
    scratch = np.empty((nkids, len(x)), dtype=x.dtype) if nkids else None
    recvs: dict[tuple[int, int, int], Request] = {}
    for t, c in order:
        a, b = parts[t][1][c]
        for i, child in enumerate(parts[t][0].children):
            assert scratch is not None
            recvs[t, c, i] = net.irecv(child, scratch[i, a:b])
    sends: list[Request] = []
    for t, c in order:
        tree, chunks = parts[t]
        a, b = chunks[c]
        for i in range(len(tree.children)):
            assert scratch is not None
            net.wait(recvs[t, c, i])
            reduce(x[a:b], scratch[i, a:b])
        if tree.parent is not None:
            sends.append(net.isend(tree.parent, x[a:b]))
    net.waitall(sends)


def _down(net: Net, parts: list[tuple[_Tree, list[tuple[int, int]]]], x: np.ndarray) -> None:
    """Broadcast phase: every chunk flows from the root to the leaves, forwarded as soon as it lands."""
    order = [(t, c) for c in range(max((len(ch) for _, ch in parts), default=0))
             for t in range(len(parts)) if c < len(parts[t][1])]
    recvs: dict[tuple[int, int], Request] = {}
    for t, c in order:
        parent = parts[t][0].parent
        if parent is not None:
            a, b = parts[t][1][c]
            recvs[t, c] = net.irecv(parent, x[a:b])
    sends: list[Request] = []
    for t, c in order:
        tree, chunks = parts[t]
        a, b = chunks[c]
        if (t, c) in recvs:
            net.wait(recvs[t, c])
        sends += [net.isend(child, x[a:b]) for child in tree.children]
    net.waitall(sends)


def tree_allreduce(net: Net, group: list[int], x: np.ndarray, reduce: Reduce, chunk_elems: int) -> None:
    """Double binary tree: half the buffer up and down each of two complementary trees."""
    n = len(group)
    if n == 1:
        return
    half = len(x) // 2
    plain = _Tree(group, net.rank, lambda p: p, lambda q: q)
    mirror = _Tree(group, net.rank, lambda p: mirrored(p, n), lambda q: mirrored(q, n))
    parts = [(plain, chunk_ranges(0, half, chunk_elems)), (mirror, chunk_ranges(half, len(x), chunk_elems))]
    _up(net, parts, x, reduce)
    _down(net, parts, x)


def tree_broadcast(net: Net, group: list[int], x: np.ndarray, root: int, chunk_elems: int) -> None:
    if len(group) > 1:
        _down(net, [(rooted_tree(group, net.rank, root), chunk_ranges(0, len(x), chunk_elems))], x)


def tree_reduce(net: Net, group: list[int], x: np.ndarray, root: int, reduce: Reduce, chunk_elems: int) -> None:
    if len(group) > 1:
        _up(net, [(rooted_tree(group, net.rank, root), chunk_ranges(0, len(x), chunk_elems))], x, reduce)
