"""The bridged NIC's peer, a plain AF_PACKET program on the other end of its link: ``recv`` takes the RoCEv2
frames of one QP and judges each (decoded by ``sw.roce``, ICRC valid, payload the NIC's pattern, PSNs in order),
``inject`` sends one SEND ONLY frame, with a wrong ICRC on request.  Run inside the peer's namespace.  Behind a
fabric (``hil run``) frames arrive with the INT stack the last leaf left (host sink mode): it is stripped first, as
the software NIC does (``sw.roce.wire.int_md.strip_int``), and the capture holds the frames without it."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from pathlib import Path
from typing import Any

from sw.roce import Flow, FlowTemplates, Opcode
from sw.roce.softnic.port import SO_RCVBUFFORCE
from sw.roce.wire.decode import decode
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.int_md import carries_int, strip_int
from sw.roce.wire.pattern import PSN_MASK, pattern_payload
from sw.roce.wire.sample_pcaps import write_frames
from sw.units.cli_guard import ArgumentParser, call_guarded

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


def judge(frames: list[bytes], qp: int, first_psn: int) -> dict[str, Any]:
    """Counts over received frames of NIC QP ``qp``: decoded with a valid ICRC, pattern payload exact, PSNs
    consecutive from ``first_psn``."""
    out = {"frames": len(frames), "icrc_ok": 0, "payload_ok": 0, "psn_in_order": 0, "bad": []}
    want = first_psn
    for k, frame in enumerate(frames):
        try:
            pkt = decode(frame)
        except RoceFormatError as exc:
            out["bad"].append(f"frame {k}: {exc}")
            continue
        out["icrc_ok"] += 1
        if bytes(pkt.payload) == pattern_payload(qp, pkt.psn, len(pkt.payload)):
            out["payload_ok"] += 1
        if pkt.psn == want:
            out["psn_in_order"] += 1
        want = (pkt.psn + 1) & PSN_MASK
    out["bad"] = out["bad"][:5]
    return out


def without_int(frames: list[bytes]) -> tuple[list[bytes], dict[str, Any]]:
    """``frames`` as the receiving NIC hands them on (an INT stack stripped); how many carried one and the hop
    counts their stacks had (the switches on the path)."""
    out, n_int, hops = [], 0, set()
    for frame in frames:
        if carries_int(frame):
            n_int += 1
            try:
                frame, records = strip_int(frame)
                hops.add(len(records))
            except RoceFormatError:
                pass            # left as it came: the judge counts it bad
        out.append(frame)
    return out, {"int_frames": n_int, "int_hop_counts": sorted(hops)}


def recv_frames(ifname: str, n_frames: int, timeout_s: float, ready=None) -> list[bytes]:
    """The first ``n_frames`` UDP/4791 frames arriving on ``ifname`` (fewer when ``timeout_s`` passes quiet)."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
    sock.bind((ifname, 0))
    sock.settimeout(timeout_s)
    if ready:
        ready()
    frames: list[bytes] = []
    while len(frames) < n_frames:
        try:
            data, addr = sock.recvfrom(65536)
        except TimeoutError:
            break
        if addr[2] == PACKET_OUTGOING or len(data) < 42 or data[12:14] != b"\x08\x00" or data[23] != 17:
            continue
        if int.from_bytes(data[36:38], "big") == 4791:
            frames.append(data)
    sock.close()
    return frames


def inject(ifname: str, flow: Flow, psn: int, n_bytes: int, bad_icrc: bool) -> bytes:
    """Send one SEND ONLY frame of ``flow`` on ``ifname``; with ``bad_icrc`` its ICRC's last byte flipped."""
    frame = bytearray(FlowTemplates(flow)[Opcode.SEND_ONLY].build(psn, bytes(n_bytes)))
    if bad_icrc:
        frame[-1] ^= 0xFF
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((ifname, 0))
    sock.send(bytes(frame))
    sock.close()
    return bytes(frame)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv", help="receive and judge one QP's frames")
    r.add_argument("--ifname", required=True)
    r.add_argument("--frames", type=int, required=True)
    r.add_argument("--qp", type=int, default=0)
    r.add_argument("--first-psn", type=int, default=0)
    r.add_argument("--timeout-s", type=float, default=60.0, help="give up after this long without a frame")
    r.add_argument("--pcap", required=True)
    r.add_argument("--json", required=True)
    i = sub.add_parser("inject", help="send one SEND ONLY frame")
    i.add_argument("--ifname", required=True)
    i.add_argument("--flow", required=True, help="the flow's fields as JSON (sw.roce.Flow)")
    i.add_argument("--psn", type=int, default=0)
    i.add_argument("--bytes", type=int, default=64)
    i.add_argument("--bad-icrc", action="store_true")


def run(args: argparse.Namespace) -> int:
    if args.cmd == "inject":
        inject(args.ifname, Flow(**json.loads(args.flow)), args.psn, args.bytes, args.bad_icrc)
        return 0
    frames = recv_frames(args.ifname, args.frames, args.timeout_s, ready=lambda: print("ready", flush=True))
    frames, int_counts = without_int(frames)
    write_frames(Path(args.pcap), frames)
    Path(args.json).write_text(json.dumps({**judge(frames, args.qp, args.first_psn), **int_counts}))
    return 0


if __name__ == "__main__":
    parser = ArgumentParser(prog="python -m sw.apps.hil.peer", description=__doc__)
    add_arguments(parser)
    sys.exit(call_guarded("hil peer", run, parser.parse_args()))
