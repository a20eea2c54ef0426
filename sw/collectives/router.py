"""The router algorithms talk to: posts sends/receives of numpy arrays to the right transport, tags every
message with the current operation, counts bytes per link class, and waits with a timeout."""

from __future__ import annotations

import copy
import select
import threading
from collections.abc import Iterable

import numpy as np

from sw.clock import Clock, get_clock

from .deadline import Backoff, Deadline
from .errors import CollectiveUserError
from .rank_layout import LINK_CLASSES, RankLayout
from .transport.base import LANE_BIT, Request, Transport, byte_view

IDLE_WAIT_MAX_S = 0.05
"""Longest wall wait of an idle progress round (a frame, a timer or new work ends it sooner)."""


class Net:
    """Point-to-point messaging of one rank over its transports; ``tag`` is set per operation by the caller."""

    def __init__(self, rank: int, layout: RankLayout, transports: list[Transport], timeout_s: float,
                 clock: Clock | None = None) -> None:
        self.rank = rank
        self.layout = layout
        self.transports = transports
        self.timeout_s = timeout_s
        self.clock = clock or get_clock()
        self._route: dict[int, Transport] = {p: t for t in transports for p in t.peers()}
        self.tag = 0
        self.bytes_sent = dict.fromkeys(LINK_CLASSES, 0)
        self.messages_sent = dict.fromkeys(LINK_CLASSES, 0)
        self._lock = threading.RLock()   # two schedules of one operation may post and progress from two threads
        self._moved = [0]                # progress rounds that moved bytes, shared with second_lane() views

    def second_lane(self) -> Net:
        """A view of this Net for a schedule running alongside the current one (its own thread): same transports,
        counters and lock, messages tagged with ``LANE_BIT`` so they never match the other schedule's."""
        view = copy.copy(self)
        view.tag = self.tag | LANE_BIT
        return view

    def _transport(self, peer: int) -> Transport:
        try:
            return self._route[peer]
        except KeyError:
            if peer == self.rank:
                raise CollectiveUserError(f"peer {peer}: a rank cannot send to or receive from itself") from None
            raise CollectiveUserError(f"peer {peer}: no such rank (world size {self.layout.world_size})") from None

    def isend(self, peer: int, buf: np.ndarray) -> Request:
        """Post a send of the contiguous array ``buf`` (leave it untouched until the request completes)."""
        with self._lock:
            req = self._transport(peer).isend(peer, self.tag, byte_view(buf))
            link = self.layout.link_class(self.rank, peer)
            self.bytes_sent[link] += req.nbytes
            self.messages_sent[link] += 1
        return req

    def irecv(self, peer: int, buf: np.ndarray) -> Request:
        """Post a receive filling the contiguous array ``buf`` with the next message from ``peer``."""
        with self._lock:
            return self._transport(peer).irecv(peer, self.tag, byte_view(buf))

    def progress(self) -> bool:
        moved = False
        with self._lock:
            for t in self.transports:
                moved |= t.progress()
            if moved:
                self._moved[0] += 1
        return moved

    def host_progress(self) -> list[Transport]:
        """Transports that only move while this process drives them (progressed between operations too)."""
        return [t for t in self.transports if t.host_progress]

    def idle_progress(self, wake_fd: int) -> bool:
        """One progress round of the ``host_progress`` transports while no operation runs; when nothing moved,
        wait for a frame, their next timer or pacing slot, or ``wake_fd`` (new work), at most ``IDLE_WAIT_MAX_S``."""
        engines = self.host_progress()
        moved = False
        for t in engines:
            moved |= t.progress()
        if moved:
            return True
        hints = [h for t in engines if (h := t.wake_hint_ns()) is not None]
        wait_s = IDLE_WAIT_MAX_S
        if hints:
            wait_s = min(wait_s, self.clock.wall_duration_ns(min(hints)) / 1e9)
        if wait_s > 0:
            select.select([wake_fd, *(fd for t in engines for fd in t.readable_fds())], [], [], wait_s)
        return False

    def wait(self, req: Request) -> None:
        self.waitall((req,))

    def waitall(self, reqs: Iterable[Request]) -> None:
        """Progress every transport until all ``reqs`` are done; raise on a failed request or the timeout."""
        pending = [r for r in reqs if not r.done]
        deadline: Deadline | None = None
        backoff = Backoff(self.clock)
        seen = self._moved[0]
        while pending:
            if self.progress() or self._moved[0] != seen:   # or the other lane's thread moved bytes
                seen = self._moved[0]
                backoff.reset()
                deadline = None  # the timeout counts time without any progress
            for r in pending:
                if r.error is not None:
                    raise r.error
            pending = [r for r in pending if not r.done]
            if not pending:
                return
            if deadline is None:
                deadline = Deadline(self.timeout_s, self.clock)
            elif deadline.expired():
                r = pending[0]
                deadline.check(f"rank {self.rank}: {r.kind} of {r.nbytes} bytes with rank {r.peer} "
                               f"(tag {r.tag:#x}; {len(pending)} requests pending)")
            hints = [h for t in self.transports if (h := t.wake_hint_ns()) is not None]
            backoff.idle(min(hints) if hints else None)
