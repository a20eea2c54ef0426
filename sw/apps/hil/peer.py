"""The bridged NIC's peer, a plain AF_PACKET program on the other end of its link: ``recv`` takes the RoCEv2
frames of one QP and judges each (decoded by ``sw.roce``, ICRC valid, payload the NIC's pattern, PSNs in order);
on request it is that QP's DCQCN notification point (CNPs on CE-marked frames), or its HPCC responder (a frame that
arrives with INT is answered by an RC ACK of its PSN with the frame's INT hops echoed in, as ``sw.roce``'s responder
does: ``insert_int``; every ``ack_every``-th such frame, and none sooner than ``ack_gap_ns`` after the last ACK), and
sums every sender's payload over time (``RecvOptions``, the
incast of ``hil run --cc dcqcn|hpcc``);
``inject`` sends one SEND ONLY frame or CNP, with a wrong ICRC on request.  Run inside the peer's namespace.  Behind a
fabric (``hil run``) frames arrive with the INT stack the last leaf left (host sink mode): it is stripped first, as
the software NIC does (``sw.roce.wire.int_md.strip_int``), and the capture holds the frames without it."""

from __future__ import annotations

import argparse
import json
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sw.cc import DcqcnNp, DcqcnParams
from sw.clock import get_clock
from sw.roce import Flow, FlowTemplates, Opcode
from sw.roce.softnic.port import SO_RCVBUFFORCE
from sw.roce.transport.rules import CREDITS_INVALID, SYN_ACK
from sw.roce.wire.decode import decode
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.flow import ECN_CE
from sw.roce.wire.int_md import carries_int, insert_int, strip_int
from sw.roce.wire.pattern import PSN_MASK, pattern_payload
from sw.roce.wire.sample_pcaps import write_frames
from sw.units.cli_guard import ArgumentParser, call_guarded

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
STOP_POLL_S = 0.2       # how often (wall) a receiver with a stop file looks for it


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


@dataclass
class RecvOptions:
    """What ``recv`` does besides collecting: only the frames of destination QP ``qpn`` are judged (every QP when
    None); with ``cnp_flow`` it is that QP's DCQCN notification point (``sw.cc.DcqcnNp``, CNP spacing
    ``cnp_interval_ns``): a CE-marked frame sends a CNP of ``cnp_flow`` back on the interface; with ``bin_ns`` the
    RoCE payload of every sender is summed per source address in bins of network time (a PSN counted once per
    QP); with ``ack_flow`` every ``ack_every``-th judged frame that carries INT is acknowledged on ``ack_flow`` with
    its hops echoed (HPCC), skipping any that arrives less than ``ack_gap_ns`` of network time after the last ACK
    sent (a NIC's HPCC engine that takes one ACK per that long loses none); with ``stop_file`` it goes on after
    ``n_frames`` until that file exists."""

    qpn: int | None = None
    cnp_flow: Flow | None = None
    cnp_interval_ns: int = 0
    ack_flow: Flow | None = None
    ack_every: int = 1
    ack_gap_ns: int = 0         # least network time between two ACKs sent
    first_psn: int = 0          # the judged QP's first PSN (the ACKs' MSN counts messages from it)
    bin_ns: int | None = None
    stop_file: Path | None = None


@dataclass
class RecvResult:
    """The judged QP's frames as they arrived and the figures of the rest of the traffic."""

    frames: list[bytes] = field(default_factory=list)
    ce_frames: int = 0
    cnps_sent: int = 0
    int_frames: int = 0
    int_echoes_sent: int = 0
    last_ack_ns: int | None = None
    first_ns: int | None = None
    bins: dict[str, dict[int, int]] = field(default_factory=dict)
    seen: set[tuple[str, int, int]] = field(default_factory=set)

    def add_payload(self, frame: bytes, now_ns: int, bin_ns: int) -> None:
        """Count ``frame``'s payload (INT stripped, decoded by ``sw.roce``) in its source's bin of ``now_ns``."""
        try:
            pkt = decode(strip_int(frame)[0] if carries_int(frame) else frame)
        except RoceFormatError:
            return
        key = (pkt.src_ip, pkt.dest_qp, pkt.psn)
        if not len(pkt.payload) or key in self.seen:
            return
        self.seen.add(key)
        if self.first_ns is None:
            self.first_ns = now_ns
        k = (now_ns - self.first_ns) // bin_ns
        per = self.bins.setdefault(pkt.src_ip, {})
        per[k] = per.get(k, 0) + len(pkt.payload)


def ack_due(opts: RecvOptions, int_frame_no: int, now_ns: int, last_ack_ns: int | None) -> bool:
    """Is the ``int_frame_no``-th INT frame (from 1), arriving at ``now_ns``, to be answered: every ``ack_every``-th,
    and ``ack_gap_ns`` or more after the last ACK sent (at ``last_ack_ns``, None before the first)?"""
    spaced = last_ack_ns is None or now_ns - last_ack_ns >= opts.ack_gap_ns
    return int_frame_no % opts.ack_every == 0 and spaced


def dest_qpn(frame: bytes) -> int:
    """The BTH destination QP of an untagged IPv4 RoCEv2 frame without INT."""
    return int.from_bytes(frame[47:50], "big")


def echo_ack(templates: FlowTemplates, frame: bytes, first_psn: int) -> bytes | None:
    """The RC ACK (credits invalid, as ``sw.roce``'s responder sends) of INT frame ``frame``'s PSN with its hops
    echoed in (``INT_ECHO_DOMAIN_ID``); None when the frame's INT or RoCE headers do not parse."""
    try:
        plain, records = strip_int(frame)
        psn = decode(plain).psn
    except RoceFormatError:
        return None
    msn = (psn + 1 - first_psn) & PSN_MASK       # every SEND ONLY is one message
    ack = templates[Opcode.ACKNOWLEDGE].build(psn, b"", ext=HeaderFields(syndrome=SYN_ACK | CREDITS_INVALID, msn=msn))
    return insert_int(ack, list(records), echo=True)


def recv_frames(ifname: str, n_frames: int, timeout_s: float, ready=None,
                opts: RecvOptions | None = None) -> RecvResult:
    """The first ``n_frames`` UDP/4791 frames of ``opts.qpn`` arriving on ``ifname`` (fewer when ``timeout_s`` of
    wall time passes without a frame), and what ``opts`` asks for besides (``RecvOptions``)."""
    opts = opts or RecvOptions()
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 16 << 20)
    sock.bind((ifname, 0))
    poll_s = min(timeout_s, STOP_POLL_S) if opts.stop_file else timeout_s
    sock.settimeout(poll_s)
    clock = get_clock()
    np_ = DcqcnNp(DcqcnParams(cnp_interval_ns=opts.cnp_interval_ns)) if opts.cnp_flow else None
    cnp = FlowTemplates(opts.cnp_flow)[Opcode.CNP].build(0) if opts.cnp_flow else b""
    acks = FlowTemplates(opts.ack_flow) if opts.ack_flow else None
    out = RecvResult()
    if ready:
        ready()
    quiet_s = 0.0
    while True:
        if len(out.frames) >= n_frames and (opts.stop_file is None or opts.stop_file.exists()):
            break
        try:
            data, addr = sock.recvfrom(65536)
        except TimeoutError:
            quiet_s += poll_s
            if quiet_s >= timeout_s:
                break
            continue
        if addr[2] == PACKET_OUTGOING or len(data) < 42 or data[12:14] != b"\x08\x00" or data[23] != 17:
            continue
        if int.from_bytes(data[36:38], "big") != 4791:
            continue
        quiet_s = 0.0
        now_ns = clock.now_ns()
        if opts.bin_ns:
            out.add_payload(data, now_ns, opts.bin_ns)
        plain = data
        if opts.qpn is not None or np_ is not None or acks is not None:
            try:
                plain = strip_int(data)[0] if carries_int(data) else data
            except RoceFormatError:
                pass
        if opts.qpn is not None and dest_qpn(plain) != opts.qpn:
            continue
        if len(out.frames) < n_frames:
            out.frames.append(data)
        if np_ is not None and plain[15] & ECN_CE == ECN_CE:
            out.ce_frames += 1
            if np_.on_packet(dest_qpn(plain), True, now_ns):
                sock.send(cnp)
                out.cnps_sent += 1
        if acks is not None and plain is not data:
            out.int_frames += 1
            if ack_due(opts, out.int_frames, now_ns, out.last_ack_ns):
                ack = echo_ack(acks, data, opts.first_psn)
                if ack is not None:
                    sock.send(ack)
                    out.int_echoes_sent += 1
                    out.last_ack_ns = now_ns
    sock.close()
    return out


def inject(ifname: str, flow: Flow, psn: int, n_bytes: int, bad_icrc: bool, cnp: bool = False) -> bytes:
    """Send one SEND ONLY frame of ``flow`` (or, with ``cnp``, a CNP: ``n_bytes`` unused) on ``ifname``, built by
    ``sw.roce``'s templates; with ``bad_icrc`` its ICRC's last byte flipped."""
    templates = FlowTemplates(flow)
    frame = bytearray(templates[Opcode.CNP].build(psn) if cnp
                      else templates[Opcode.SEND_ONLY].build(psn, bytes(n_bytes)))
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
    r.add_argument("--dest-qpn", type=int, help="judge only the frames of this destination QP number")
    r.add_argument("--cnp-flow", help="be the judged QP's DCQCN notification point: CNPs of this flow (JSON, "
                   "sw.roce.Flow's fields) on CE-marked frames")
    r.add_argument("--cnp-interval-ns", type=int, default=0, help="NP: least ns between two CNPs (default 0)")
    r.add_argument("--bin-ns", type=int, help="sum every sender's payload per source address in bins of this "
                   "many ns of network time")
    r.add_argument("--stop-file", help="after --frames, go on until this file exists")
    r.add_argument("--int-echo-flow", help="be the judged QP's HPCC responder: RC ACKs of this flow (JSON, "
                   "sw.roce.Flow's fields) echoing the INT hops of every --ack-every-th frame that carries INT")
    r.add_argument("--ack-every", type=int, default=1, help="with --int-echo-flow: acknowledge every N-th INT "
                   "frame (default 1)")
    r.add_argument("--ack-gap-ns", type=int, default=0, help="with --int-echo-flow: no ACK sooner than this many ns "
                   "of network time after the last one (default 0)")
    i = sub.add_parser("inject", help="send one SEND ONLY frame")
    i.add_argument("--ifname", required=True)
    i.add_argument("--flow", required=True, help="the flow's fields as JSON (sw.roce.Flow)")
    i.add_argument("--psn", type=int, default=0)
    i.add_argument("--bytes", type=int, default=64)
    i.add_argument("--bad-icrc", action="store_true")
    i.add_argument("--cnp", action="store_true", help="a CNP of the flow instead of a SEND ONLY frame")


def run(args: argparse.Namespace) -> int:
    if args.cmd == "inject":
        inject(args.ifname, Flow(**json.loads(args.flow)), args.psn, args.bytes, args.bad_icrc, cnp=args.cnp)
        return 0
    opts = RecvOptions(qpn=args.dest_qpn, cnp_flow=Flow(**json.loads(args.cnp_flow)) if args.cnp_flow else None,
                       cnp_interval_ns=args.cnp_interval_ns, bin_ns=args.bin_ns,
                       stop_file=Path(args.stop_file) if args.stop_file else None,
                       ack_flow=Flow(**json.loads(args.int_echo_flow)) if args.int_echo_flow else None,
                       ack_every=max(1, args.ack_every), ack_gap_ns=max(0, args.ack_gap_ns),
                       first_psn=args.first_psn)
    got = recv_frames(args.ifname, args.frames, args.timeout_s, ready=lambda: print("ready", flush=True), opts=opts)
    frames, int_counts = without_int(got.frames)
    write_frames(Path(args.pcap), frames)
    extra: dict[str, Any] = {"ce_frames": got.ce_frames, "cnps_sent": got.cnps_sent} if opts.cnp_flow else {}
    if opts.ack_flow:
        extra["int_echoes_sent"] = got.int_echoes_sent
    if opts.bin_ns:
        extra["bins"] = {"bin_ns": opts.bin_ns, "by_src": {ip: [per.get(k, 0) for k in range(max(per) + 1)]
                                                            for ip, per in got.bins.items()}}
    Path(args.json).write_text(json.dumps({**judge(frames, args.qp, args.first_psn), **int_counts, **extra}))
    return 0


if __name__ == "__main__":
    parser = ArgumentParser(prog="python -m sw.apps.hil.peer", description=__doc__)
    add_arguments(parser)
    sys.exit(call_guarded("hil peer", run, parser.parse_args()))
