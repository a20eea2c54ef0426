"""Where every rank sits: server and local rank (= GPU = rail), and the link class between two ranks.

Link classes are what the byte counters and the cost model distinguish: ``intra`` (shared memory inside a
server, NVLink's stand-in), ``rail`` (between servers on the same rail: one leaf, no spine) and ``cross``
(between servers and rails: through a spine).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import CollectiveUserError

LINK_CLASSES = ("intra", "rail", "cross")


@dataclass(frozen=True)
class RankLayout:
    """``server_of[r]`` and ``local_of[r]`` for every global rank r."""

    server_of: tuple[int, ...]
    local_of: tuple[int, ...]

    @classmethod
    def grid(cls, servers: int, gpus: int) -> RankLayout:
        """Ranks numbered server-major: rank = server * gpus + gpu (torchrun's order)."""
        ranks = range(servers * gpus)
        return cls(tuple(r // gpus for r in ranks), tuple(r % gpus for r in ranks))

    def __post_init__(self) -> None:
        if len(self.server_of) != len(self.local_of) or not self.server_of:
            raise CollectiveUserError("layout: need one (server, local rank) per rank")
        seen: set[tuple[int, int]] = set()
        for rank, key in enumerate(zip(self.server_of, self.local_of, strict=True)):
            if key in seen:
                raise CollectiveUserError(f"rank {rank}: server {key[0]} already has a rank with LOCAL_RANK {key[1]}")
            seen.add(key)
        for s in set(self.server_of):
            locals_ = sorted(self.local_ranks(s))
            if [self.local_of[r] for r in locals_] != list(range(len(locals_))):
                got = [self.local_of[r] for r in locals_]
                raise CollectiveUserError(f"server {s}: LOCAL_RANK values {got} are not 0..{len(locals_) - 1}")

    @property
    def world_size(self) -> int:
        """Number of ranks."""
        return len(self.server_of)

    @property
    def servers(self) -> list[int]:
        """Server indices that hold ranks, ascending."""
        return sorted(set(self.server_of))

    def local_ranks(self, server: int) -> list[int]:
        """Global ranks on ``server`` ordered by local rank."""
        return sorted((r for r, s in enumerate(self.server_of) if s == server), key=lambda r: self.local_of[r])

    def rail_ranks(self, local_rank: int) -> list[int]:
        """Global ranks on rail ``local_rank`` ordered by server."""
        return sorted((r for r, g in enumerate(self.local_of) if g == local_rank), key=lambda r: self.server_of[r])

    @property
    def uniform(self) -> bool:
        """Every server has the same number of GPUs (rail-aware algorithms need it)."""
        return len({len(self.local_ranks(s)) for s in self.servers}) == 1

    @property
    def gpus_per_server(self) -> int:
        """GPUs (ranks) of the largest server."""
        return max(len(self.local_ranks(s)) for s in self.servers)

    def link_class(self, a: int, b: int) -> str:
        """How ranks ``a`` and ``b`` are connected: 'intra', 'rail' or 'cross' (see ``LINK_CLASSES``)."""
        if self.server_of[a] == self.server_of[b]:
            return "intra"
        return "rail" if self.local_of[a] == self.local_of[b] else "cross"
