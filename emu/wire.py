"""A user-space link emulator between two interfaces: rate, delay, jitter, loss, duplication, reordering.

The kernel here has no netem (only tbf/htb), and honest µs-scale behaviour needs the project's clock with its
dilation anyway, so links that need more than a rate limit are emulated by this process: it reads frames from
one interface with an AF_PACKET socket and sends them out of the other after serialization at the link rate
and the link delay, both directions, with seeded randomness so runs repeat.
Run inside a namespace that holds both interfaces: ``python -m emu.wire --a IF --b IF [profile flags]``.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import select
import signal
import socket
import sys
from dataclasses import asdict, dataclass, field

from sw.clock import Clock, get_clock
from sw.clock.lag import DEFAULT_RATE_BPS, LagStats, mtu_serialization_ns, register, write_lag_file
from sw.units import ETH_WIRE_OVERHEAD_BYTES, UnitError, parse_duration_ns, parse_rate_bps

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
MAX_FRAME_BYTES = 65536
LAG_WRITE_WALL_NS = 500_000_000  # how often the lag of a running emulator lands in $STARPULSE_LAG_DIR


@dataclass(frozen=True)
class WireProfile:
    """What one direction of a link does to frames; percentages are 0..100."""

    rate_bps: int | None = None
    delay_ns: int = 0
    jitter_ns: int = 0
    loss_pct: float = 0.0
    dup_pct: float = 0.0
    reorder_pct: float = 0.0
    queue_pkts: int = 1000

    def __post_init__(self) -> None:
        for name in ("loss_pct", "dup_pct", "reorder_pct"):
            value = getattr(self, name)
            if not 0.0 <= value <= 100.0:
                raise UnitError(f"{name}={value}: must be within 0..100")
        if self.rate_bps is not None and self.rate_bps <= 0:
            raise UnitError(f"rate_bps={self.rate_bps}: must be > 0")
        if self.delay_ns < 0 or self.jitter_ns < 0:
            raise UnitError("delay_ns and jitter_ns must be >= 0")
        if self.queue_pkts < 1:
            raise UnitError(f"queue_pkts={self.queue_pkts}: must be >= 1")


@dataclass
class WireCounters:
    rx_frames: int = 0
    tx_frames: int = 0
    lost_frames: int = 0
    duplicated_frames: int = 0
    reordered_frames: int = 0
    queue_drops: int = 0


@dataclass
class _Direction:
    """Frames from ``rx`` waiting to leave through ``tx``: a release-time heap plus the serializer state."""

    rx: socket.socket
    tx: socket.socket
    profile: WireProfile
    rng: random.Random
    counters: WireCounters = field(default_factory=WireCounters)
    heap: list[tuple[int, int, bytes]] = field(default_factory=list)
    link_free_ns: int = 0
    seq: int = 0
    lag: LagStats | None = None     # frames released vs their release times (sw.clock.lag)

    def admit(self, frame: bytes, now_ns: int) -> None:
        p = self.profile
        self.counters.rx_frames += 1
        if p.loss_pct and self.rng.random() * 100.0 < p.loss_pct:
            self.counters.lost_frames += 1
            return
        copies = 1
        if p.dup_pct and self.rng.random() * 100.0 < p.dup_pct:
            copies = 2
            self.counters.duplicated_frames += 1
        for _ in range(copies):
            if len(self.heap) >= p.queue_pkts:
                self.counters.queue_drops += 1
                return
            start_ns = max(now_ns, self.link_free_ns)
            if p.rate_bps:
                self.link_free_ns = start_ns + ((len(frame) + ETH_WIRE_OVERHEAD_BYTES) * 8 * 10**9) // p.rate_bps
            else:
                self.link_free_ns = start_ns
            release_ns = self.link_free_ns + p.delay_ns
            if p.jitter_ns:
                release_ns += self.rng.randint(-p.jitter_ns, p.jitter_ns)
            if p.reorder_pct and self.rng.random() * 100.0 < p.reorder_pct:
                release_ns = self.link_free_ns  # skips the delay line: overtakes frames in flight
                self.counters.reordered_frames += 1
            self.seq += 1
            heapq.heappush(self.heap, (release_ns, self.seq, frame))

    def release(self, now_ns: int) -> None:
        lag = self.lag
        while self.heap and self.heap[0][0] <= now_ns:
            release_ns, _, frame = heapq.heappop(self.heap)
            if lag is not None:
                lag.record(now_ns - release_ns)
            try:
                self.tx.send(frame)
                self.counters.tx_frames += 1
            except OSError:
                self.counters.queue_drops += 1


def _open(ifname: str) -> socket.socket:
    # protocol 0 receives nothing until bound, so no frame of another interface slips in before bind()
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    sock.bind((ifname, ETH_P_ALL))
    sock.setblocking(False)
    return sock


class Wire:
    """Both directions of one emulated link between interfaces ``if_a`` and ``if_b``."""

    def __init__(self, if_a: str, if_b: str, a_to_b: WireProfile, b_to_a: WireProfile, *,
                 seed: int = 1, clock: Clock | None = None) -> None:
        self.clock = clock or get_clock()
        sock_a, sock_b = _open(if_a), _open(if_b)
        self.dirs = {
            sock_a.fileno(): _Direction(sock_a, sock_b, a_to_b, random.Random(seed)),
            sock_b.fileno(): _Direction(sock_b, sock_a, b_to_a, random.Random(seed + 1)),
        }
        for fd, (name, prof) in zip(self.dirs, ((f"{if_a}>{if_b}", a_to_b), (f"{if_b}>{if_a}", b_to_a)), strict=True):
            bound = mtu_serialization_ns(prof.rate_bps or DEFAULT_RATE_BPS)
            self.dirs[fd].lag = register(f"wire {name}", LagStats(bound))
        self.running = True

    def counters(self) -> dict[str, dict[str, int]]:
        ab, ba = self.dirs.values()
        return {"a_to_b": asdict(ab.counters), "b_to_a": asdict(ba.counters)}

    def run(self, duration_ns: int | None = None) -> None:
        """Forward until stopped (SIGTERM/SIGINT via ``stop()``) or ``duration_ns`` of network time passed."""
        start_ns = self.clock.now_ns()
        fds = list(self.dirs)
        lag_every_ns = self.clock.net_duration_ns(LAG_WRITE_WALL_NS)
        lag_written_ns = start_ns
        while self.running:
            now_ns = self.clock.now_ns()
            if duration_ns is not None and now_ns - start_ns >= duration_ns:
                break
            if now_ns - lag_written_ns >= lag_every_ns:
                write_lag_file()
                lag_written_ns = now_ns
            next_ns = min((d.heap[0][0] for d in self.dirs.values() if d.heap), default=now_ns + 50_000_000)
            timeout_s = max(0.0, self.clock.wall_duration_ns(next_ns - now_ns) / 1e9)
            readable, _, _ = select.select(fds, [], [], min(timeout_s, 0.05))
            for fd in readable:
                d = self.dirs[fd]
                for _ in range(256):
                    try:
                        frame, addr = d.rx.recvfrom(MAX_FRAME_BYTES)
                    except BlockingIOError:
                        break
                    if addr[2] == PACKET_OUTGOING:
                        continue
                    d.admit(frame, self.clock.now_ns())
            now_ns = self.clock.now_ns()
            for d in self.dirs.values():
                d.release(now_ns)

    def stop(self, *_: object) -> None:
        self.running = False


def _profile_from(args: argparse.Namespace) -> WireProfile:
    return WireProfile(
        rate_bps=parse_rate_bps(args.rate, what="--rate") if args.rate else None,
        delay_ns=parse_duration_ns(args.delay, what="--delay") if args.delay else 0,
        jitter_ns=parse_duration_ns(args.jitter, what="--jitter") if args.jitter else 0,
        loss_pct=args.loss, dup_pct=args.dup, reorder_pct=args.reorder, queue_pkts=args.queue_pkts,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emu.wire", description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="first interface")
    parser.add_argument("--b", required=True, help="second interface")
    parser.add_argument("--rate", help="link rate, e.g. 100M (network time)")
    parser.add_argument("--delay", help="one-way delay, e.g. 10us")
    parser.add_argument("--jitter", help="uniform jitter, e.g. 2us")
    parser.add_argument("--loss", type=float, default=0.0, help="loss percent 0..100")
    parser.add_argument("--dup", type=float, default=0.0, help="duplication percent 0..100")
    parser.add_argument("--reorder", type=float, default=0.0, help="percent of frames that skip the delay")
    parser.add_argument("--queue-pkts", type=int, default=1000, help="frames waiting per direction")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stats", help="write counters as JSON to this file on exit")
    args = parser.parse_args(argv)
    try:
        profile = _profile_from(args)
        wire = Wire(args.a, args.b, profile, profile, seed=args.seed)
    except (UnitError, OSError) as exc:
        print(f"emu.wire: error: {exc}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, wire.stop)
    signal.signal(signal.SIGINT, wire.stop)
    write_lag_file()                # the collector sees this emulator from the start (then every 0.5 s, at exit)
    print("ready", flush=True)
    wire.run()
    if args.stats:
        with open(args.stats, "w") as fh:
            json.dump(wire.counters(), fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
