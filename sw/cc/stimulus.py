"""Seeded random event streams for the CC models, and their replay: what an RTL scoreboard feeds its DUT and
compares register by register (the same stream through the golden model gives the expected states).

Streams are plain tuples of integers so a cocotb test can drive them onto ports without this package's types.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from sw.cc.base import AckInfo, IntHop
from sw.cc.dcqcn import DcqcnParams, DcqcnRp, RpState
from sw.cc.hpcc import Hpcc, HpccParams, HpccState

CNP, BYTES, TICK = "cnp", "bytes", "tick"


@dataclass(frozen=True, slots=True)
class RpEvent:
    """One reaction-point input: ``kind`` is cnp, bytes (``nbytes`` sent) or tick (time passes)."""

    kind: str
    now_ns: int
    nbytes: int = 0


def dcqcn_rp_events(seed: int, count: int, params: DcqcnParams | None = None,
                    max_gap_ns: int | None = None) -> Iterator[RpEvent]:
    """``count`` events with non-decreasing times: CNP bursts, byte batches and idle gaps long enough to walk
    through fast recovery, additive and hyper increase (gaps up to ~2x F rate-timer periods)."""
    p = params or DcqcnParams()
    rng = random.Random(seed)
    gap_max = max_gap_ns if max_gap_ns is not None else 2 * (p.fast_recovery_stages + 1) * p.rate_timer_ns
    now = 0
    for _ in range(count):
        r = rng.random()
        if r < 0.15:
            now += rng.randrange(0, max(1, p.cnp_interval_ns))
            yield RpEvent(CNP, now)
        elif r < 0.75:
            now += rng.randrange(0, max(1, p.rate_timer_ns // 4))
            yield RpEvent(BYTES, now, rng.randrange(64, max(65, p.byte_counter_bytes // 2)))
        else:
            now += rng.randrange(0, max(1, gap_max))
            yield RpEvent(TICK, now)


def replay_dcqcn_rp(events: list[RpEvent], params: DcqcnParams | None = None) -> list[RpState]:
    """Drive a fresh :class:`DcqcnRp` with ``events``; the state after each event."""
    rp = DcqcnRp(params)
    out = []
    for ev in events:
        if ev.kind == CNP:
            rp.on_cnp(ev.now_ns)
        elif ev.kind == BYTES:
            rp.on_bytes_sent(ev.nbytes, ev.now_ns)
        elif ev.kind == TICK:
            rp.advance(ev.now_ns)
        else:
            raise ValueError(f"unknown RP event kind {ev.kind!r}: expected cnp, bytes or tick")
        out.append(rp.state())
    return out


def hpcc_acks(seed: int, count: int, params: HpccParams | None = None,
              hops: int = 1) -> Iterator[tuple[int, AckInfo]]:
    """``count`` (arrival time, ACK) pairs along one path of ``hops`` hops. The load changes regime every
    20-80 ACKs (a level of 0.25..1.5x the link, per-hop jitter below it; queues only when overloaded), so a
    stream walks HPCC through additive stages, multiplicative increase and decrease."""
    p = params or HpccParams()
    rng = random.Random(seed)
    t = p.base_rtt_ns
    ts = [0] * hops
    tx = [0] * hops
    now, seq = 0, 0
    bdp = p.w_max_bytes
    level_64, left = 64, 0                              # load in 1/64 of the link
    for _ in range(count):
        if left == 0:
            level_64, left = rng.randrange(16, 97), rng.randrange(20, 81)
        left -= 1
        gap = rng.randrange(1, t + 1)
        now += gap
        recs = []
        for h in range(hops):
            load_64 = level_64 * rng.randrange(48, 65) // 64
            ts[h] += gap
            tx[h] += p.line_rate_kbps * gap * load_64 // (64 * 8_000_000)
            qlen = rng.randrange(0, bdp + 1) if load_64 > 64 else 0
            recs.append(IntHop(ts[h], tx[h], qlen, p.line_rate_kbps))
        seq += rng.randrange(0, 4 * 4096)
        yield now, AckInfo(seq, seq + rng.randrange(0, bdp + 1), tuple(recs))


def replay_hpcc(acks: list[tuple[int, AckInfo]], params: HpccParams | None = None) -> list[HpccState]:
    """Drive a fresh :class:`Hpcc` with ``acks``; the state after each ACK."""
    h = Hpcc(params)
    out = []
    for now, ack in acks:
        h.on_ack(ack, now)
        out.append(h.state())
    return out
