"""A NIC stuck sending PFC PAUSE (a PFC storm), run inside a fabric host by the fault injector (``pfc_storm``).

It sends 802.1Qbb frames pausing one priority with ``--quanta`` (default the maximum) out of ``--dev`` from the
NIC's MAC, again every ``--interval-ns`` of network time (``sw.clock``: shorter than the pause lasts, so the leaf's
egress queue toward the NIC never resumes), until ``quit`` on stdin or SIGTERM; then one XON (quanta 0) frame,
as a NIC that is reset does, and exit.  Prints ``ready`` after the first frame and the count sent at the end.
"""

from __future__ import annotations

import argparse
import select
import signal
import socket
import sys

from sw.clock import Clock, get_clock
from sw.units import int_flag
from sw.units.pfc_frame import PFC_MAX_QUANTA, PFC_PRIORITIES, build_pfc_frame


class _Stopped(Exception):
    """SIGTERM arrived: leave the wait at once."""


def _raise_stopped(*_: object) -> None:
    raise _Stopped


def storm(dev: str, mac: str, priority: int, quanta: int, interval_ns: int, clock: Clock | None = None) -> int:
    """Send the pause every ``interval_ns`` (network time) until stdin says ``quit`` (or closes) or SIGTERM
    arrives; then XON.  Returns the number of pause frames sent."""
    clock = clock or get_clock()
    src = bytes.fromhex(mac.replace(":", ""))
    pause, xon = build_pfc_frame(src, {priority: quanta}), build_pfc_frame(src, {priority: 0})
    sent = 0
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0) as sock:
        sock.bind((dev, 0))
        signal.signal(signal.SIGTERM, _raise_stopped)
        try:
            next_ns = clock.now_ns()
            while True:
                if clock.now_ns() >= next_ns:
                    sock.send(pause)
                    sent += 1
                    if sent == 1:
                        print("ready", flush=True)
                    next_ns += interval_ns
                wait_s = max(clock.wall_duration_ns(next_ns - clock.now_ns()), 0) / 1e9
                ready, _, _ = select.select([sys.stdin], [], [], wait_s)
                if ready and sys.stdin.readline().strip() in ("quit", ""):
                    break
        except _Stopped:
            pass
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        sock.send(xon)
    return sent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m emu.pfc_storm", description=__doc__.splitlines()[0])
    p.add_argument("--dev", required=True, help="the NIC's interface (e.g. s1-eth0)")
    p.add_argument("--mac", required=True, help="the NIC's MAC, the frames' source")
    p.add_argument("--priority", type=int_flag(0, PFC_PRIORITIES - 1), required=True, metavar="P",
                   help="the PFC priority paused (the fabric's lossless RoCE class)")
    p.add_argument("--quanta", type=int_flag(1, PFC_MAX_QUANTA), default=PFC_MAX_QUANTA, metavar="Q",
                   help=f"pause time in quanta of 512 bit times, 1..{PFC_MAX_QUANTA} (default {PFC_MAX_QUANTA})")
    p.add_argument("--interval-ns", type=int_flag(1), required=True, metavar="NS", help="network ns between frames")
    args = p.parse_args(argv)
    print(storm(args.dev, args.mac, args.priority, args.quanta, args.interval_ns), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
