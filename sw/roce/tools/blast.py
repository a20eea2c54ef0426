"""Line-rate RoCEv2 traffic of one host's NICs: every NIC paces RDMA WRITE frames to its peers and checks what
it receives, for a bounded time; one JSON line of counters per NIC.  ``fabric bench`` runs one per server.

``python -m sw.roce.tools.blast --nic IFNAME[=DST_IP,...] ... --rate-bps R --wall-s S [--datapath native|python]``
Each NIC's frames are paced by a token bucket (``sw.cc.pacer.TokenBucket``, network time from ``sw.clock``) at
``R`` and sent round robin over its destinations (one flow each: its own QP pair, so its own UDP source port and
ECMP path); lateness against the bucket's schedule is reported as component ``nic IFNAME`` (``sw.clock.lag``).
The frames come from the data path of ``sw.roce.native.datapath`` (C, or the Python reference).  After the
counters are printed the process waits for ``quit`` (or end of input) on stdin, so its CPU time can be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field

from sw.cc.pacer import UNITS_PER_BYTE, TokenBucket
from sw.clock import Clock, get_clock
from sw.clock.lag import LagStats, mtu_serialization_ns, register, write_lag_file
from sw.roce.native.datapath import DATAPATHS, Datapath, RxCounts, TxFlow, make_datapath
from sw.roce.softnic.port import RawSocketPort, path_mtu_for
from sw.roce.softnic.route import next_hop_mac
from sw.roce.wire.flow import Flow
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.template import PacketTemplate
from sw.units import parse_rate_bps
from sw.units.cli_guard import ArgumentParser, call_guarded

BURST_BYTES = 64 * 1024    # the bucket's depth: as the software NIC's pacer (sw.roce.softnic.nic)
DRAIN_WALL_NS = 500_000_000  # after sending stops, at least: keep receiving what is still in flight
MAX_WAIT_WALL_NS = 20_000_000
MIN_SLEEP_WALL_NS = 50_000   # below this a sleep costs more than it saves: go round again
QPN_BASE = 0x100


@dataclass
class NicTraffic:
    """One NIC: its port, bucket, flows (one per destination) and receive counters."""

    port: RawSocketPort
    bucket: TokenBucket
    flows: list[TxFlow]
    lag: LagStats
    rx: RxCounts = field(default_factory=RxCounts)
    next_flow: int = 0


def open_nic(ifname: str, dsts: list[str], rate_bps: int, clock: Clock, index: int) -> NicTraffic:
    """A NIC on ``ifname`` with one RDMA WRITE flow per destination (MTU-sized payloads)."""
    port = RawSocketPort(ifname)
    payload = bytes(i & 0xFF for i in range(path_mtu_for(port.mtu)))
    flows = []
    for k, dst in enumerate(dsts):
        mac = next_hop_mac(dst, port.ip, ifname, peer_mac=port.mac, clock=clock)
        flow = Flow(port.mac, mac, port.ip, dst, QPN_BASE + index * 64 + k, QPN_BASE + 32 + k)
        flows.append(TxFlow(PacketTemplate(flow, Opcode.RDMA_WRITE_MIDDLE), payload))
    lag = register(f"nic {ifname}", LagStats(mtu_serialization_ns(rate_bps)))
    return NicTraffic(port, TokenBucket(rate_bps, BURST_BYTES, clock.now_ns(), start_full=False), flows, lag)


def _send_due(nic: NicTraffic, dp: Datapath, now_ns: int) -> None:
    """Send what the bucket allows now: one burst to the next flow, lateness from when it became eligible."""
    b = nic.bucket
    b.refill(now_ns)
    if not nic.flows or b.credit < 0:
        return
    flow = nic.flows[nic.next_flow]
    nic.next_flow = (nic.next_flow + 1) % len(nic.flows)
    frame_bytes = len(flow.frame0)
    late_ns = (b.credit // b.rate_bps) if b.credit < b.credit_max else 0   # credit piles up while we are late
    count = b.credit // (frame_bytes * UNITS_PER_BYTE) + 1
    sent = dp.tx_burst(nic.port, flow, int(count))
    if sent:
        b.credit -= sent * frame_bytes * UNITS_PER_BYTE
        nic.lag.record(int(late_ns), sent)


def _wait_ns(nics: list[NicTraffic], now_ns: int) -> int:
    """Network ns until the first bucket is eligible again (0: now)."""
    waits = [(-n.bucket.credit) // n.bucket.rate_bps + 1 for n in nics if n.flows and n.bucket.credit < 0]
    return max(0, min(waits)) if waits else 10**12


def run(nics: list[NicTraffic], dp: Datapath, clock: Clock, wall_ns: int, drain_wall_ns: int = DRAIN_WALL_NS) -> None:
    """Offer traffic for ``wall_ns`` of wall time, then only receive for ``drain_wall_ns``.

    The loop sleeps until the next bucket is due rather than waking for every received frame: what arrived
    meanwhile waits in the socket and is taken in one burst (the generator only counts it), so the cost per
    frame is the data path's, not a wake-up's."""
    start = clock.now_ns()
    for nic in nics:     # empty at the start: no burst of every NIC at once on "go"
        nic.bucket = TokenBucket(nic.bucket.rate_bps, BURST_BYTES, start, start_full=False)
    send_end = start + clock.net_duration_ns(wall_ns)
    end = send_end + clock.net_duration_ns(drain_wall_ns)
    while (now := clock.now_ns()) < end:
        for nic in nics:
            while dp.rx_poll(nic.port, nic.rx):
                pass
            if now < send_end:
                _send_due(nic, dp, now)
        now = clock.now_ns()
        wait = _wait_ns(nics, now) if now < send_end else end - now
        wall = min(clock.wall_duration_ns(wait), MAX_WAIT_WALL_NS)
        if wall > MIN_SLEEP_WALL_NS:
            idle_wait(clock, wall)


def idle_wait(clock: Clock, wall_ns: float) -> None:
    """Sleep ``wall_ns`` of wall time (its own function: profiles tell idle from work)."""
    clock.sleep_ns(clock.net_duration_ns(wall_ns))


def report(nics: list[NicTraffic], dp: Datapath, wall_ns: int) -> dict[str, object]:
    """Per NIC: frames/bytes sent, send errors, and the receive counters."""
    out: dict[str, object] = {}
    for nic in nics:
        nic.port.poll_kernel_drops()
        out[nic.port.ifname] = {
            "tx_frames": sum(f.frames for f in nic.flows), "tx_bytes": sum(f.bytes for f in nic.flows),
            "tx_errors": sum(f.errors for f in nic.flows), "rx": nic.rx.as_dict(),
            "rx_kernel_drops": nic.port.counters.rx_kernel_drops}
    return {"datapath": dp.name, "wall_s": wall_ns / 1e9, "nics": out}


def parse_nic(text: str) -> tuple[str, list[str]]:
    """``IFNAME`` or ``IFNAME=DST,DST``."""
    name, _, dsts = text.partition("=")
    if not name:
        raise ValueError(f"--nic {text!r}: expected IFNAME or IFNAME=DST_IP[,DST_IP...]")
    return name, [d for d in dsts.split(",") if d]


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m sw.roce.tools.blast", description=__doc__.splitlines()[0])
    p.add_argument("--nic", action="append", required=True, metavar="IFNAME[=DST,...]", help="a NIC and its peers")
    p.add_argument("--rate-bps", required=True, metavar="RATE", help="offered rate per NIC (network time), e.g. 1G")
    p.add_argument("--wall-s", type=float, default=3.0, metavar="S", help="seconds of wall time to send (default 3)")
    p.add_argument("--drain-s", type=float, default=DRAIN_WALL_NS / 1e9, metavar="S",
                   help="wall seconds to keep receiving after sending stops (default 0.5)")
    p.add_argument("--datapath", default="native", choices=DATAPATHS, help="C (native, default) or Python path")
    return p


def main_args(args: argparse.Namespace) -> int:
    clock = get_clock()
    if not 0.1 <= args.wall_s <= 3600:
        raise ValueError(f"--wall-s {args.wall_s}: must be within 0.1..3600")
    if not 0 <= args.drain_s <= 3600:
        raise ValueError(f"--drain-s {args.drain_s}: must be within 0..3600")
    rate_bps = parse_rate_bps(args.rate_bps)
    dp = make_datapath(args.datapath)
    nics = [open_nic(name, dsts, rate_bps, clock, i) for i, (name, dsts) in enumerate(map(parse_nic, args.nic))]
    print("ready", flush=True)
    if wait_stdin() != "go":
        return 1
    wall_ns = int(args.wall_s * 1e9)
    run(nics, dp, clock, wall_ns, int(args.drain_s * 1e9))
    write_lag_file()
    print(json.dumps(report(nics, dp, wall_ns)), flush=True)
    wait_stdin()      # "quit" or EOF: the caller has read our CPU time
    return 0


def wait_stdin() -> str:
    """The next line from the caller (its own function: profiles tell idle from work)."""
    return sys.stdin.readline().strip()


if __name__ == "__main__":
    sys.exit(call_guarded("blast", main_args, build_parser().parse_args()))
