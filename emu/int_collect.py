"""The operations INT collector: runs in the fabric's collector host, reads the INT reports the sink leaves clone to
it (``fabric.p4``: one INT packet in N per flow in host mode, every one in report mode) and appends their hop records
to the run's telemetry store (``int_hops``), stamped in network time on the box's common base.

``python -m emu.int_collect --ifnames col-eth0,col-eth1 --db telemetry.sqlite --nodes 1=p0l0,3=sp0
--dilation K``: prints ``ready``, writes a batch every ``FLUSH_WALL_S`` wall seconds, and on ``quit``/EOF on stdin
or SIGTERM writes what it holds, records its counts in the store's ``meta`` (``int_collector``) and prints them as
one JSON line.  Reports are decoded by the one INT codec (``sw.roce.wire.int_md``) and the one RoCE decoder.
"""

from __future__ import annotations

import argparse
import json
import select
import signal
import socket
import sys
from collections.abc import Mapping
from typing import Any

from sw.clock import Clock
from sw.roce.wire.decode import decode
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.int_md import parse_int, strip_int
from sw.units.telemetry import TelemetryStore

ETH_P_ALL = 0x0003
FLUSH_WALL_S = 0.5
RCVBUF_BYTES = 4 << 20
HOP_LATENCY_UNIT_NS = 1000
"""fabric.p4 stamps ``deq_timedelta`` (v1model: microseconds) as the hop latency."""


def report_rows(frame: bytes, t_ns: int, nodes: Mapping[int, str]) -> list[dict[str, Any]]:
    """One report frame -> its hop records as ``int_hops`` rows (the first switch on the path is hop 0), with the
    flow (addresses, UDP ports, the RoCE destination QP when the payload is RoCE, else -1).  A frame that is
    no INT report raises ``RoceFormatError`` (its ``kind`` names why)."""
    hops, _, _ = parse_int(frame)
    inner, _ = strip_int(frame)
    try:
        pkt = decode(inner, check_icrc=False)
        src, dst, sport, qp = pkt.src_ip, pkt.dst_ip, pkt.udp_sport, pkt.dest_qp
        dport = 4791
    except RoceFormatError:          # INT on a UDP packet that is no RoCE (probes): addresses and ports only
        src, dst, sport, dport, qp = _udp_flow(inner)
    out = []
    for index, h in enumerate(reversed(hops)):
        out.append({"t_ns": t_ns, "switch": nodes.get(h.node_id, f"node{h.node_id}"), "node_id": h.node_id,
                    "hop": index, "ingress_port": h.ingress_port, "egress_port": h.egress_port,
                    "hop_latency_ns": h.hop_latency * HOP_LATENCY_UNIT_NS, "queue_id": h.queue_id,
                    "queue_pkts": h.queue_occupancy, "src": src, "dst": dst, "sport": sport, "dport": dport,
                    "qp": qp})
    return out


def _udp_flow(frame: bytes) -> tuple[str, str, int, int, int]:
    """Addresses and UDP ports of a plain (INT-stripped) IPv4 or IPv6 UDP frame; the QP is -1 (none)."""
    if frame[12:14] == b"\x86\xdd":
        src, dst = (socket.inet_ntop(socket.AF_INET6, frame[o:o + 16]) for o in (22, 38))
        l4 = 54
    else:
        src, dst = socket.inet_ntoa(frame[26:30]), socket.inet_ntoa(frame[30:34])
        l4 = 14 + (frame[14] & 0x0F) * 4
    return src, dst, int.from_bytes(frame[l4:l4 + 2], "big"), int.from_bytes(frame[l4 + 2:l4 + 4], "big"), -1


class IntCollector:
    """Raw sockets on the collector's NICs; ``run`` stores the reports' hops until told to stop."""

    def __init__(self, ifnames: list[str], store: TelemetryStore, nodes: Mapping[int, str], clock: Clock) -> None:
        self.store, self.nodes, self.clock = store, nodes, clock
        self.reports = 0
        self.rows = 0
        self.drops: dict[str, int] = {}
        self.pending: list[dict[str, Any]] = []
        self.socks = []
        for ifname in ifnames:
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            s.bind((ifname, 0))
            s.setblocking(False)
            self.socks.append(s)

    def take(self, frame: bytes) -> None:
        """One frame off a collector NIC: its rows wait for the next flush, or it counts as a drop."""
        try:
            rows = report_rows(frame, self.clock.box_ns(), self.nodes)
        except RoceFormatError as exc:
            self.drops[exc.kind] = self.drops.get(exc.kind, 0) + 1
            return
        self.reports += 1
        self.pending += rows

    def flush(self) -> None:
        if self.pending:
            self.store.add_int_hops(self.pending)
            self.rows += len(self.pending)
            self.pending = []

    def summary(self) -> dict[str, Any]:
        return {"reports": self.reports, "hop_rows": self.rows, "drops": self.drops}

    def run(self, stdin: Any, stop: list[bool]) -> None:
        """Until ``quit``/EOF on ``stdin`` or ``stop[0]`` (SIGTERM): read, and flush every ``FLUSH_WALL_S``."""
        last = self.clock.now_ns()
        flush_ns = self.clock.net_duration_ns(FLUSH_WALL_S * 1e9)
        while not stop[0]:
            try:
                ready, _, _ = select.select([stdin, *self.socks], [], [], FLUSH_WALL_S)
            except InterruptedError:
                continue
            for s in ready:
                if s is stdin:
                    line = stdin.readline()
                    if not line or line.strip() == b"quit":
                        stop[0] = True
                    continue
                while True:
                    try:
                        self.take(s.recv(65536))
                    except BlockingIOError:
                        break
            if self.clock.now_ns() - last >= flush_ns:
                self.flush()
                last = self.clock.now_ns()
        self.flush()
        self.store.set_meta(int_collector=self.summary())

    def close(self) -> None:
        for s in self.socks:
            s.close()


def parse_nodes(text: str) -> dict[int, str]:
    """``1=p0l0,3=sp0`` -> {1: "p0l0", 3: "sp0"} (INT node id = the switch's device id)."""
    out = {}
    for item in filter(None, text.split(",")):
        node, _, name = item.partition("=")
        out[int(node)] = name
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emu.int_collect")
    parser.add_argument("--ifnames", required=True, help="comma-separated collector NICs")
    parser.add_argument("--db", required=True, help="the run's telemetry store (sw.units.telemetry)")
    parser.add_argument("--nodes", default="", help="INT node id -> switch name: 1=p0l0,3=sp0")
    parser.add_argument("--dilation", type=float, default=1.0, help="the fabric's time dilation")
    args = parser.parse_args(argv)
    stop = [False]
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__(0, True))
    collector = IntCollector(args.ifnames.split(","), TelemetryStore(args.db), parse_nodes(args.nodes),
                             Clock(args.dilation))
    print("ready", flush=True)
    try:
        collector.run(sys.stdin.buffer, stop)
    finally:
        collector.close()
        collector.store.close()
    print(json.dumps(collector.summary()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
