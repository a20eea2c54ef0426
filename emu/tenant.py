"""Another tenant's RoCE traffic on a running fabric: one RC QP from a NIC of one host to a NIC of another, RDMA
WRITEs back to back at a paced rate, in the fabric's lossless RoCE class (the fault injector's ``congest``).

``python -m emu.tenant receiver --dev IF --store DIR --gateway-mac MAC --rate-bps R`` (in the target host's
namespace) and ``python -m emu.tenant sender --dev IF --store DIR --gateway-mac MAC --rate-bps R [--cc dcqcn]``
(in the sending host's).  Each end is the software NIC (``sw.roce.softnic``) on an interface a rank of the job
also uses, so it takes its own QP numbers (``TENANT_FIRST_QPN``: the job's frames and the tenant's never reach each
other's QPs; each NIC drops the other's frames as ``unknown_qp_frames``).  The sender's NIC paces its QP at R,
honours the fabric's PFC pauses ($STARPULSE_NIC_PFC, as the ranks' NICs do) and runs DCQCN: the receiver's NIC
answers CE-marked frames with CNPs and ACKs the WRITEs.  The sender prints ``ready`` once connected; each end runs
until ``quit`` (or end of input) on stdin, then prints one JSON line of counters.  Time is network time
(``sw.clock``, $STARPULSE_TIME_DILATION).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

import numpy as np

from sw.clock import get_clock
from sw.clock.lag import write_lag_file
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.port import interface_mtu, open_device, path_mtu_for
from sw.roce.softnic.qp_pacer import CC_NAMES
from sw.roce.transport.qp_connect import connect, exchange, qp_info, random_psn
from sw.roce.transport.verbs import ACCESS_ALL, SendWr, WcStatus, WrOpcode
from sw.units import parse_rate_bps
from sw.units.cli_guard import ArgumentParser, call_guarded
from sw.units.file_store import FileStore

TENANT_FIRST_QPN = 0x800000
"""The tenant's QP numbers start here, far above the ranks' (``sw.roce.softnic.nic.FIRST_QPN`` and up)."""
MESSAGE_BYTES = 64 * 1024
OUTSTANDING = 4
"""WRITEs in flight: enough to keep a paced QP busy, as a streaming tenant does."""
CONNECT_WALL_S = 30.0
POLL_WALL_NS = 20_000_000
"""The engine never idles longer than this (wall), so ``quit`` is seen promptly with no frame arriving."""
QP_TIMEOUT = 17
"""Local ACK timeout exponent (4.096 us x 2^17 = 0.5 s network): a paused, shared port is slow, not broken."""


class TenantError(RuntimeError):
    """The tenant's stream could not start or broke: one line."""

    is_user_error = True


def _stdin_closed(stop: threading.Event) -> None:
    """Set ``stop`` at ``quit`` or end of input (the fault injector's ``uncongest`` and the fabric's teardown)."""
    for line in sys.stdin:
        if line.strip() == "quit":
            break
    stop.set()


def _open(args: argparse.Namespace) -> tuple[SoftNic, int]:
    rate_bps = parse_rate_bps(args.rate_bps, what="--rate-bps")
    nic = open_device(args.dev, line_rate_bps=rate_bps, cc=args.cc if args.role == "sender" else "none",
                      first_qpn=TENANT_FIRST_QPN)
    return nic, path_mtu_for(interface_mtu(args.dev))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One end of the stream until stopped; its counters."""
    clock = get_clock()
    nic, mtu = _open(args)
    store = FileStore(args.store)
    pd, cq = nic.alloc_pd(), nic.create_cq()
    buf = np.zeros(MESSAGE_BYTES, np.uint8)
    mr = pd.reg_mr(buf, ACCESS_ALL)
    qp = nic.create_qp(pd, cq)
    psn = random_psn()
    me, peer = ("tx", "rx") if args.role == "sender" else ("rx", "tx")
    remote = exchange(store, me, peer, qp_info(qp, psn, mr), int(clock.net_duration_ns(CONNECT_WALL_S * 1e9)))
    connect(qp, psn, remote | {"mac": args.gateway_mac}, path_mtu=mtu, timeout=QP_TIMEOUT)
    stop = threading.Event()
    threading.Thread(target=_stdin_closed, args=(stop,), name="tenant-stdin", daemon=True).start()
    print("ready", flush=True)
    wr = SendWr(1, WrOpcode.RDMA_WRITE, mr.sge(), remote_addr=int(remote["addr"]), rkey=int(remote["rkey"]))
    wait_ns = max(1, int(clock.net_duration_ns(POLL_WALL_NS)))
    posted = done = 0
    while not stop.is_set():
        while args.role == "sender" and posted - done < OUTSTANDING:
            qp.post_send(wr)
            posted += 1
        nic.poll(wait_ns)
        for wc in cq.poll(64):
            if wc.status != WcStatus.SUCCESS:
                raise TenantError(f"tenant sender on {args.dev}: a WRITE completed with {wc.status.name}")
            done += 1
    write_lag_file()
    pfc = nic.pfc.as_dict(clock.now_ns()) if nic.pfc is not None else {}
    return {"role": args.role, "dev": args.dev, "writes_done": done, "bytes": done * MESSAGE_BYTES,
            "qp": nic.qp_counters(), "unknown_qp_frames": nic.counters.unknown_qp_frames, "pfc": pfc}


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m emu.tenant", description=__doc__.splitlines()[0])
    p.add_argument("role", choices=("sender", "receiver"))
    p.add_argument("--dev", required=True, help="this host's NIC interface")
    p.add_argument("--store", required=True, help="rendezvous directory shared by both ends")
    p.add_argument("--gateway-mac", required=True, help="MAC of the leaf port the NIC plugs into (next hop)")
    p.add_argument("--rate-bps", required=True, help="the sender's pacing rate, network time (e.g. 80M)")
    p.add_argument("--cc", choices=CC_NAMES, default="dcqcn", help="the sender's congestion control (default dcqcn)")
    return p


def main_args(args: argparse.Namespace) -> int:
    print(json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(call_guarded("emu.tenant", main_args, build_parser().parse_args()))
