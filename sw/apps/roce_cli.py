"""``starpulse roce``: RoCEv2 wire-format tools (``pcap``, ``bench``) and the transport's ``perf``.

``starpulse roce pcap OUTDIR`` writes one capture per opcode for Wireshark; ``starpulse roce bench`` measures
Scapy vs template packet building and prints ``scapy_pps`` and ``template_pps`` (``--json`` for JSON).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

MAX_BENCH_SECONDS = 60.0
MAX_PAYLOAD_BYTES = 9000


class RoceUsageError(ValueError):
    """Bad command-line input to ``starpulse roce``: printed as one line, exit 2."""

    is_user_error = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    pcap = sub.add_parser("pcap", help="write one pcap per RC opcode and CNP (valid ICRC) into OUTDIR")
    pcap.add_argument("outdir", metavar="OUTDIR", help="directory for the pcap files (created if missing)")
    bench = sub.add_parser("bench", help="packets/s of Scapy vs the template fast path (and the decoder)")
    bench.add_argument("--seconds", default="1", metavar="S", help="seconds to run each path (default 1)")
    bench.add_argument("--payload-bytes", default="1024", metavar="N", help="payload per packet (default 1024)")
    bench.add_argument(
        "--opcode",
        default="RDMA_WRITE_MIDDLE",
        metavar="NAME",
        help="opcode to build, e.g. SEND_ONLY (default RDMA_WRITE_MIDDLE)",
    )
    bench.add_argument("--ipv6", action="store_true", help="use an IPv6 flow instead of IPv4")
    bench.add_argument("--json", action="store_true", help="print one JSON object")
    from sw.apps.perf_selftest import add_perf_arguments

    perf = sub.add_parser("perf", help="perftest-style bandwidth/latency: server, client, or --selftest")
    add_perf_arguments(perf)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= MAX_BENCH_SECONDS:
        raise RoceUsageError(f"--seconds {text!r}: expected a number of seconds in (0, {MAX_BENCH_SECONDS:g}]")
    return value


def _payload_bytes(text: str) -> int:
    if not text.isdigit() or int(text) > MAX_PAYLOAD_BYTES:
        raise RoceUsageError(f"--payload-bytes {text!r}: expected an integer 0..{MAX_PAYLOAD_BYTES}")
    return int(text)


def _run_pcap(outdir: str) -> int:
    from sw.roce.wire.sample_pcaps import write_opcode_pcaps

    path = Path(outdir)
    if path.exists() and not path.is_dir():
        raise RoceUsageError(f"OUTDIR {outdir!r}: exists and is not a directory")
    try:
        paths = write_opcode_pcaps(path)
    except OSError as exc:
        raise RoceUsageError(f"OUTDIR {outdir!r}: cannot write there ({exc.strerror})") from None
    for p in paths:
        print(p)
    return 0


def _run_bench(args: argparse.Namespace) -> int:
    from sw.roce.tools.bench import run_bench
    from sw.roce.wire.opcodes import LAYOUTS, Opcode

    seconds = _seconds(args.seconds)
    payload_bytes = _payload_bytes(args.payload_bytes)
    try:
        opcode = Opcode[args.opcode.upper()]
    except KeyError:
        raise RoceUsageError(f"--opcode {args.opcode!r}: expected one of {', '.join(o.name for o in Opcode)}") from None
    if payload_bytes and not LAYOUTS[opcode].has_payload:
        raise RoceUsageError(f"--opcode {opcode.name} carries no payload: use --payload-bytes 0")
    result = run_bench(seconds, payload_bytes=payload_bytes, opcode=opcode, ipv6=args.ipv6)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['opcode']} IPv{result['ip_version']}, {payload_bytes} B payload, "
            f"{result['frame_bytes']} B frames, {seconds:g} s per path, one core:"
        )
        print(f"  scapy_pps    {result['scapy_pps']:>10,}")
        print(f"  template_pps {result['template_pps']:>10,}  ({result['speedup']}x)")
        print(f"  decode_pps   {result['decode_pps']:>10,}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "pcap":
        return _run_pcap(args.outdir)
    if args.action == "bench":
        return _run_bench(args)
    if args.action == "perf":
        from sw.apps.perf_selftest import run_perf

        return run_perf(args)
    raise RoceUsageError(f"unknown action {args.action!r}")
