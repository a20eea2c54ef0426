"""Traffic tools run inside fabric hosts (stdlib only, started by ``emu.traffic``); one mode per invocation.

- probe/echo (``--addrs A,B``): binds ``--port`` on each local address, prints ``ready``, echoes every request,
  and for each JSON line ``{"pairs": [[src, dst], ...]}`` on stdin probes those pairs (a window of requests in
  flight, retries) and prints one JSON result line.  With INT on the probe port the fabric inserts an INT-MD
  stack after the UDP header; the receiver reads hop count and per-hop queue occupancy from it, so one probe
  proves reachability and the switch-hop count of both directions.
- ``--flows N``: N one-packet flows from distinct random source ports (ECMP entropy).
- ``--blast N --pps R [--ecn]``: paced datagrams; ``--sink ADDR`` records ECN bits and the last hop's INT.
- ``--collect IF,IF``: captures INT reports on the collector's NICs until ``quit``.
"""

from __future__ import annotations

import argparse
import json
import random
import select
import socket
import struct
import sys
from dataclasses import asdict, dataclass

from sw.clock import Clock, get_clock

MAGIC = b"SPRB"
KIND_REQUEST = 1
KIND_REPLY = 2
KIND_DATA = 3
ECT0 = 0x02
# magic, kind, seq, hops seen by the responder on the request (0xff = no INT), spare
_HDR = struct.Struct("!4sBIBx")
DSCP_INT = 0x17
INT_SHIM_BYTES = 4
INT_MD_BYTES = 12
INT_MD_WORDS = 4   # shim + MD header, in the shim's length field
NO_INT = 0xFF
ETH_P_ALL = 0x0003
DEFAULT_WINDOW = 8
MAX_RTO_NS = 8_000_000_000       # a probe's retransmission timeout never grows past 8 s of network time
EPHEMERAL_MIN_PORT = 1024
SEQ_INDEX_BITS = 20
SEQ_INDEX_MASK = (1 << SEQ_INDEX_BITS) - 1
SEQ_EPOCH_MASK = (1 << (32 - SEQ_INDEX_BITS)) - 1


@dataclass(frozen=True)
class ProbeIntHop:
    """One hop's INT metadata as fabric.p4 writes it (instruction bits 0,1,2,3,5,7: 7 words per hop)."""

    node_id: int
    ingress_port: int = 0
    egress_port: int = 0
    hop_latency_us: int = 0
    queue_occupancy_pkts: int = 0
    egress_ts_us: int = 0
    tx_bytes: int = 0


_HOP7 = struct.Struct("!IHHIIQI")   # node, in port, out port, latency, queue id|occupancy, egress ts, tx bytes


class IntFormatError(ValueError):
    """An INT-marked packet or INT report this tool cannot parse; ``kind`` names the drop counter it counts in."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind


def count_drop(drops: dict[str, int], exc: IntFormatError) -> None:
    """One more packet dropped for ``exc.kind``."""
    drops[exc.kind] = drops.get(exc.kind, 0) + 1


@dataclass(frozen=True)
class IntStack:
    """The per-hop INT data a packet carried, newest hop (the last switch) first."""

    hop_list: tuple[ProbeIntHop, ...]

    @property
    def hops(self) -> int:
        return len(self.hop_list)

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(h.node_id for h in self.hop_list)

    @property
    def queue_occupancy(self) -> tuple[int, ...]:
        return tuple(h.queue_occupancy_pkts for h in self.hop_list)


def parse_int(tos: int, payload: bytes) -> tuple[IntStack | None, bytes]:
    """Split an INT-MD stack (present when the DSCP is the INT marker) from the UDP payload; an INT-marked
    payload whose stack is cut short or whose lengths do not add up raises ``IntFormatError``."""
    if (tos >> 2) != DSCP_INT:
        return None, payload
    if len(payload) < INT_SHIM_BYTES + INT_MD_BYTES:
        raise IntFormatError("truncated", f"INT-marked payload of {len(payload)} bytes has no INT shim/MD header")
    length_words = payload[1]
    int_bytes = length_words * 4
    md_word0 = struct.unpack_from("!I", payload, INT_SHIM_BYTES)[0]
    hop_words = (md_word0 >> 8) & 0x1F
    if int_bytes > len(payload):
        raise IntFormatError("truncated", f"INT stack of {int_bytes} bytes in a payload of {len(payload)}")
    stack_words = length_words - INT_MD_WORDS
    if stack_words < 0 or (stack_words and (hop_words == 0 or stack_words % hop_words)):
        raise IntFormatError("bad_length", f"INT length {length_words} words with {hop_words}-word hops")
    hops = []
    for h in range(stack_words // hop_words if hop_words else 0):
        off = INT_SHIM_BYTES + INT_MD_BYTES + h * hop_words * 4
        if hop_words * 4 == _HOP7.size:
            node, inp, outp, lat, q, ts, txb = _HOP7.unpack_from(payload, off)
            hops.append(ProbeIntHop(node, inp, outp, lat, q & 0xFFFFFF, ts, txb))
        else:
            hops.append(ProbeIntHop(struct.unpack_from("!I", payload, off)[0]))
    return IntStack(tuple(hops)), payload[int_bytes:]


def blast(src: str, dst: str, port: int, count: int, rate_pps: float, ecn: bool, size_bytes: int,
          clock: Clock | None = None) -> int:
    """``count`` datagrams of ``size_bytes`` payload paced at ``rate_pps`` (network time), ECT(0) if ``ecn``."""
    clock = clock or get_clock()
    payload = _HDR.pack(MAGIC, KIND_DATA, 0, NO_INT).ljust(size_bytes, b"\0")
    gap_ns = int(1e9 / rate_pps)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((src, 0))
        if ecn:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, ECT0)
        start = clock.now_ns()
        for i in range(count):
            clock.sleep_until_ns(start + i * gap_ns)
            s.sendto(payload, (dst, port))
    return count


def sink(addr: str, port: int, idle_ms: int, max_packets: int, clock: Clock | None = None,
         start_ms: int | None = None) -> list[list[int]]:
    """Receive data packets on ``addr:port`` until ``idle_ms`` pass without one (before the first packet:
    ``start_ms``, default ``idle_ms``, since the sender may start seconds later on a big fabric); per packet
    ``[ecn, hops, last-hop latency us, last-hop queue occupancy, last-hop egress timestamp us]``."""
    clock = clock or get_clock()
    out: list[list[int]] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind((addr, port))
        print("ready", flush=True)
        while len(out) < max_packets:
            wait_ms = idle_ms if out or start_ms is None else start_ms
            ready, _, _ = select.select([s], [], [], clock.wall_duration_ns(wait_ms * 1_000_000) / 1e9)
            if not ready:
                break
            data, anc, _flags, _peer = s.recvmsg(65536, socket.CMSG_SPACE(4))
            tos = next((c[0] for lvl, kind, c in anc if lvl == socket.IPPROTO_IP and kind == socket.IP_TOS and c), 0)
            try:
                stack, body = parse_int(tos, data)
            except IntFormatError:
                continue                       # not one of our probes' packets: the sink records only those
            if not body.startswith(MAGIC):
                continue
            hop = stack.hop_list[0] if stack and stack.hop_list else ProbeIntHop(0)
            out.append([tos & 3, stack.hops if stack else 0, hop.hop_latency_us, hop.queue_occupancy_pkts,
                        hop.egress_ts_us])
    return out


class RetransmitTimer:
    """RFC 6298's retransmission timeout in network time: srtt + 4 rttvar of first-attempt replies, never below
    ``floor_ns``, doubled once per round of expiries, at most ``MAX_RTO_NS``.  Probes resent on a fixed short
    timeout pile up behind a starved software fabric: the 256-NIC reachability check lost probes to its own
    resends overflowing the leaves' receive rings."""

    def __init__(self, floor_ns: int) -> None:
        self.floor_ns = floor_ns
        self.rto_ns = floor_ns
        self.srtt_ns: float | None = None
        self.rttvar_ns = 0.0

    def sample(self, rtt_ns: int) -> None:
        if self.srtt_ns is None:
            self.srtt_ns, self.rttvar_ns = float(rtt_ns), rtt_ns / 2
        else:
            self.rttvar_ns = 0.75 * self.rttvar_ns + 0.25 * abs(self.srtt_ns - rtt_ns)
            self.srtt_ns = 0.875 * self.srtt_ns + 0.125 * rtt_ns
        self.rto_ns = int(min(MAX_RTO_NS, max(self.floor_ns, self.srtt_ns + 4 * self.rttvar_ns)))

    def backoff(self) -> None:
        self.rto_ns = min(MAX_RTO_NS, 2 * self.rto_ns)


class Prober:
    """Sockets on every local address; ``serve_once`` answers requests, ``probe`` measures a list of pairs."""

    def __init__(self, addrs: list[str], port: int, clock: Clock | None = None) -> None:
        self.clock = clock or get_clock()
        self.port = port
        self.socks: dict[str, socket.socket] = {}
        for addr in addrs:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
            s.bind((addr, port))
            s.setblocking(False)
            self.socks[addr] = s
        self.by_fd = {s.fileno(): (a, s) for a, s in self.socks.items()}
        self.replies: dict[int, tuple[int, IntStack | None, int]] = {}
        self.answered = 0
        self.drops: dict[str, int] = {}   # packets on the probe port this prober could not parse, by reason
        self.epoch = 0   # high bits of the sequence number: late replies to an earlier round never count

    def _drain(self, timeout_s: float) -> None:
        ready, _, _ = select.select(list(self.socks.values()), [], [], max(0.0, timeout_s))
        for s in ready:
            while True:
                try:
                    data, anc, _flags, peer = s.recvmsg(65536, socket.CMSG_SPACE(4))
                except BlockingIOError:
                    break
                tos = 0
                for level, kind, cdata in anc:
                    if level == socket.IPPROTO_IP and kind == socket.IP_TOS and cdata:
                        tos = cdata[0]
                try:
                    stack, body = parse_int(tos, data)
                except IntFormatError as exc:
                    count_drop(self.drops, exc)
                    continue
                if len(body) < _HDR.size:
                    continue
                magic, msg_kind, seq, seen = _HDR.unpack_from(body)
                if magic != MAGIC:
                    continue
                if msg_kind == KIND_REQUEST:
                    hops = stack.hops if stack else NO_INT
                    s.sendto(_HDR.pack(MAGIC, KIND_REPLY, seq, min(hops, NO_INT)), peer)
                    self.answered += 1
                elif msg_kind == KIND_REPLY and seq >> SEQ_INDEX_BITS == self.epoch:
                    self.replies.setdefault(seq & SEQ_INDEX_MASK, (seen, stack, self.clock.now_ns()))

    def serve_once(self, timeout_s: float) -> None:
        self._drain(timeout_s)

    def probe(self, pairs: list[tuple[str, str]], *, timeout_ms: int, retries: int,
              window: int = DEFAULT_WINDOW) -> list[dict]:
        """Probe every pair with at most ``window`` requests in flight (so a big fabric of software switches is
        not flooded); an unanswered request is resent after the ``RetransmitTimer``'s timeout (at least
        ``timeout_ms``), up to ``retries`` times."""
        if len(pairs) > SEQ_INDEX_MASK:
            raise ValueError(f"{len(pairs)} pairs: at most {SEQ_INDEX_MASK} per round")
        self.epoch = (self.epoch + 1) & SEQ_EPOCH_MASK
        self.replies.clear()
        clock = self.clock
        timer = RetransmitTimer(timeout_ms * 1_000_000)
        sent_ns: dict[int, int] = {}
        attempts: dict[int, int] = {}
        todo = list(range(len(pairs) - 1, -1, -1))     # popped from the end: pair 0 first
        inflight: dict[int, int] = {}                  # index -> deadline (ns)
        while todo or inflight:
            while todo and len(inflight) < window:
                i = todo.pop()
                src, dst = pairs[i]
                now = clock.now_ns()
                sent_ns[i] = now
                attempts[i] = attempts.get(i, 0) + 1
                inflight[i] = now + timer.rto_ns
                try:
                    seq = (self.epoch << SEQ_INDEX_BITS) | i
                    self.socks[src].sendto(_HDR.pack(MAGIC, KIND_REQUEST, seq, 0), (dst, self.port))
                except OSError:
                    pass
            next_deadline = min(inflight.values()) if inflight else clock.now_ns()
            self._drain(clock.wall_duration_ns(max(0, next_deadline - clock.now_ns())) / 1e9)
            now = clock.now_ns()
            for i in [i for i in inflight if i in self.replies]:
                del inflight[i]
                if attempts[i] == 1:             # Karn: a resent probe's reply may answer either copy
                    timer.sample(self.replies[i][2] - sent_ns[i])
            expired = [i for i, d in inflight.items() if d <= now]
            if expired:
                timer.backoff()
            for i in expired:
                del inflight[i]
                if attempts[i] <= retries:
                    todo.append(i)   # else: given up, reported as not ok
        out = []
        for i, (src, dst) in enumerate(pairs):
            rep = self.replies.get(i)
            if rep is None:
                out.append({"src": src, "dst": dst, "ok": False})
                continue
            seen, stack, at_ns = rep
            out.append({
                "src": src, "dst": dst, "ok": True, "rtt_ns": at_ns - sent_ns[i],
                "fwd_hops": None if seen == NO_INT else seen,
                "rev_hops": stack.hops if stack else None,
                "rev_node_ids": list(stack.node_ids) if stack else [],
                "rev_queue_occupancy": list(stack.queue_occupancy) if stack else [],
                "rev_int": [asdict(h) for h in stack.hop_list] if stack else [],   # every field, last hop first
            })
        self.replies.clear()
        return out

    def close(self) -> None:
        for s in self.socks.values():
            s.close()


def send_flows(src: str, dst: str, port: int, count: int, seed: int) -> int:
    """One datagram per flow from ``src`` to ``dst:port``, each flow from a distinct random (seeded) source port."""
    sports = random.Random(seed).sample(range(EPHEMERAL_MIN_PORT, 65536), count)
    sent = 0
    for sport in sports:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((src, sport))
            s.sendto(_HDR.pack(MAGIC, KIND_REPLY, 0, NO_INT), (dst, port))   # a reply: nobody answers it
            sent += 1
    return sent


def parse_report(frame: bytes) -> dict:
    """An INT report as the collector sees it: the original IPv4/UDP packet with the INT stack still inside;
    anything else raises ``IntFormatError`` (kind ``not_report`` for frames that are no INT report at all)."""
    if len(frame) < 14 or frame[12:14] != b"\x08\x00":
        raise IntFormatError("not_report", "not an IPv4 frame")
    if len(frame) < 14 + 20 + 8:
        raise IntFormatError("truncated", f"IPv4 frame of {len(frame)} bytes ends inside the IP/UDP headers")
    ip = frame[14:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[0] >> 4 != 4 or ihl < 20:
        raise IntFormatError("bad_length", f"IPv4 version/header length byte 0x{ip[0]:02x}")
    if ip[9] != socket.IPPROTO_UDP:
        raise IntFormatError("not_report", f"IP protocol {ip[9]} is not UDP")
    if len(ip) < ihl + 8:
        raise IntFormatError("truncated", f"IPv4 header of {ihl} bytes leaves no UDP header in {len(ip)} bytes")
    stack, body = parse_int(ip[1], ip[ihl + 8:])
    if stack is None:
        raise IntFormatError("not_report", "UDP packet without the INT DSCP")
    return {"src": socket.inet_ntoa(ip[12:16]), "dst": socket.inet_ntoa(ip[16:20]), "hops": stack.hops,
            "node_ids": list(stack.node_ids), "probe": body.startswith(MAGIC)}


def collect(ifnames: list[str], stdin, max_reports: int = 100_000) -> dict:
    """Capture INT reports on the collector's NICs until ``quit`` (or EOF) on ``stdin``:
    ``{"reports": [...], "drops": {reason: frames}}`` (frames that were no INT report or could not be parsed)."""
    socks = {}
    for ifname in ifnames:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind((ifname, 0))
        s.setblocking(False)
        socks[s] = ifname
    print("ready", flush=True)
    reports: list[dict] = []
    drops: dict[str, int] = {}
    try:
        while len(reports) < max_reports:
            ready, _, _ = select.select([stdin, *socks], [], [], 1.0)
            for s in ready:
                if s is stdin:
                    line = stdin.readline()
                    if not line or line.strip() in (b"quit", "quit"):
                        return {"reports": reports, "drops": drops}
                    continue
                while True:
                    try:
                        frame = s.recv(65536)
                    except BlockingIOError:
                        break
                    try:
                        reports.append({"iface": socks[s], **parse_report(frame)})
                    except IntFormatError as exc:
                        count_drop(drops, exc)
    finally:
        for s in socks:
            s.close()
    return {"reports": reports, "drops": drops}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m emu.probe")
    parser.add_argument("--addrs", help="comma-separated local addresses to bind (probe/echo mode)")
    parser.add_argument("--port", type=int, default=4791)
    parser.add_argument("--flows", type=int, metavar="N", help="send N one-packet flows --src -> --dst and exit")
    parser.add_argument("--src")
    parser.add_argument("--dst")
    parser.add_argument("--seed", type=int, default=1, help="seed of the flows' source ports")
    parser.add_argument("--blast", type=int, metavar="N", help="send N paced datagrams --src -> --dst and exit")
    parser.add_argument("--pps", type=float, default=1000.0, help="--blast rate in packets/s (network time)")
    parser.add_argument("--size", type=int, default=200, help="--blast payload bytes")
    parser.add_argument("--ecn", action="store_true", help="--blast packets are ECN-capable (ECT(0))")
    parser.add_argument("--sink", metavar="ADDR", help="receive data packets on ADDR:--port, print them as JSON")
    parser.add_argument("--idle-ms", type=int, default=1000, help="--sink stops after this long without data")
    parser.add_argument("--start-ms", type=int, help="--sink waits this long for its first packet (default: --idle-ms)")
    parser.add_argument("--max-packets", type=int, default=100000)
    parser.add_argument("--collect", metavar="IF,IF", help="capture INT reports on these NICs until 'quit'")
    args = parser.parse_args(argv)
    if args.collect:
        print(json.dumps(collect(args.collect.split(","), sys.stdin.buffer)), flush=True)
        return 0
    if args.blast is not None:
        print(blast(args.src, args.dst, args.port, args.blast, args.pps, args.ecn, args.size), flush=True)
        return 0
    if args.sink:
        print(json.dumps(sink(args.sink, args.port, args.idle_ms, args.max_packets, start_ms=args.start_ms)),
              flush=True)
        return 0
    if args.flows is not None:
        print(send_flows(args.src, args.dst, args.port, args.flows, args.seed), flush=True)
        return 0
    if not args.addrs:
        parser.error("--addrs is required in probe mode")
    prober = Prober(args.addrs.split(","), args.port)
    print("ready", flush=True)
    stdin = sys.stdin.buffer
    buf = b""
    try:
        while True:
            ready, _, _ = select.select([stdin, *prober.socks.values()], [], [], 1.0)
            if stdin in ready:
                chunk = stdin.read1(65536) if hasattr(stdin, "read1") else stdin.readline()
                if not chunk:
                    return 0
                buf += chunk
                while b"\n" in buf:
                    line, _, buf = buf.partition(b"\n")
                    if line.strip() == b"quit":
                        return 0
                    if line.strip():
                        req = json.loads(line)
                        results = prober.probe([tuple(p) for p in req["pairs"]], timeout_ms=req.get("timeout_ms", 500),
                                               retries=req.get("retries", 3))
                        print(json.dumps({"results": results, "answered": prober.answered, "drops": prober.drops}),
                              flush=True)
            prober.serve_once(0.0)
    finally:
        prober.close()


if __name__ == "__main__":
    sys.exit(main())
