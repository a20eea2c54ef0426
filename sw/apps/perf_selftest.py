"""`starpulse roce perf`: perftest-style server/client over the software RoCE NIC, and `--selftest`, which
builds two namespaces joined by a shaped link, runs one transfer, verifies it, tears down and prints one
JSON object.  ``--op atomic`` measures fetch-and-add ops/s and latency; ``--ipv6`` runs the QP over the
interfaces' IPv6 addresses (the selftest assigns ULA addresses itself).  ``--rd-atomic N`` (perftest's
``--outs``) bounds the RDMA READs / atomics each QP keeps outstanding; a selftest given ``--iters`` or
``--tx-depth`` moves that many ``--size`` messages with that many in flight instead of one transfer.

The selftest is the top layer, so it may import ``emu`` (lazily, inside ``run_perf``); ``sw.roce`` never does.
Also runnable as ``python -m sw.apps.perf_selftest`` (the selftest starts its two ends that way in the namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sw.clock import ENV_DILATION, Clock, get_clock, set_clock
from sw.clock.lag import (
    ENV_LAG_DIR,
    add_strict_fidelity_flag,
    component_summaries,
    fidelity,
    fidelity_exit,
    read_lag_dir,
    search_dilation,
)
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.port import device_path_mtu, open_device
from sw.roce.softnic.qp_pacer import CC_NAMES
from sw.roce.tools.perf import OPS, PerfClient, PerfConfig, PerfError, run_server
from sw.roce.transport.rules import PATH_MTUS
from sw.roce.transport.verbs import ATOMIC_BYTES, MAX_QP_INIT_RD_ATOM, query_device
from sw.roce.wire.gid import interface_ipv6
from sw.units import (
    MAX_LINK_RATE_BPS,
    AutoDilation,
    UnitError,
    add_time_dilation_flag,
    float_flag,
    format_rate_bps,
    format_size_bytes,
    int_flag,
    parse_duration_ns,
    parse_rate_bps,
    parse_size_bytes,
)
from sw.units.cli_guard import ArgumentParser, call_guarded
from sw.units.file_store import FileStore

DEFAULT_LINK_RATE = "100M"
DEFAULT_SELFTEST_SIZE = "16M"
DEFAULT_SWEEP = "64,256,1K,4K,16K,64K,256K,1M"
DEFAULT_ITERS = 1000
DEFAULT_TX_DEPTH = 64
MAX_ITERS = 1_000_000
MAX_TX_DEPTH = 16_384   # work requests in flight: a send queue as deep as a real NIC's (max_qp_wr)
MAX_TIMEOUT_S = 7 * 86400.0
SELFTEST_IF_MTU = 9000
IMPAIRED_DELAY_NS = 20_000
REORDER_DELAY_NS = 1_000_000
SELFTEST_ADDR4 = ("10.77.0.1/24", "10.77.0.2/24")
SELFTEST_ADDR6 = ("fd77::1/64", "fd77::2/64")  # ULA, assigned without duplicate-address detection


class PerfArgError(ValueError):
    """A bad flag value; names the flag, the value and what is allowed."""

    is_user_error = True


def add_perf_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of `starpulse roce perf` (server | client | --selftest)."""
    parser.add_argument(
        "role", nargs="?", choices=("server", "client"), help="side to run (omit with --selftest)"
    )
    parser.add_argument(
        "--selftest",
        action="store_true",
        help="build two namespaces with a shaped link, run, verify, tear down, print JSON",
    )
    parser.add_argument(
        "--op",
        choices=tuple(OPS),
        default="write",
        help="RDMA operation (default write; atomic = 8-byte fetch-and-add: ops/s and latency)",
    )
    parser.add_argument(
        "--ipv6", action="store_true", help="run the QP over IPv6 (the interface's IPv6 address; GID = that address)"
    )
    parser.add_argument(
        "--size", help=f"bytes per message (selftest: one transfer, default {DEFAULT_SELFTEST_SIZE})"
    )
    parser.add_argument("--sizes", default=DEFAULT_SWEEP, help=f"client size sweep (default {DEFAULT_SWEEP})")
    parser.add_argument(
        "--iters",
        type=int_flag(1, MAX_ITERS),
        help=f"messages per size, at most (default {DEFAULT_ITERS}; selftest: --size messages, default one)",
    )
    parser.add_argument(
        "--lat-iters", type=int_flag(0, MAX_ITERS), default=20, help="latency samples per size (default 20; 0 = off)"
    )
    parser.add_argument(
        "--tx-depth",
        type=int_flag(1, MAX_TX_DEPTH),
        help=f"outstanding work requests (default {DEFAULT_TX_DEPTH}; selftest: 1 per transfer)",
    )
    parser.add_argument(
        "--rd-atomic",
        type=int,
        default=MAX_QP_INIT_RD_ATOM,
        help=f"RDMA READs / atomics outstanding per QP (max_rd_atomic; each end offers as many responder resources, "
        f"the smaller wins; default and maximum {MAX_QP_INIT_RD_ATOM})",
    )
    parser.add_argument(
        "--link-rate",
        default=DEFAULT_LINK_RATE,
        help=f"link rate the NIC paces at and the selftest shapes to (default {DEFAULT_LINK_RATE})",
    )
    parser.add_argument("--loss", type=float, default=0.0, help="selftest: loss percent on the link")
    parser.add_argument("--dup", type=float, default=0.0, help="selftest: duplication percent on the link")
    parser.add_argument("--reorder", type=float, default=0.0, help="selftest: reordering percent on the link")
    parser.add_argument("--cc", choices=CC_NAMES, default="none", help="congestion control (default none)")
    parser.add_argument(
        "--base-rtt", default="1ms", help="HPCC's base RTT T (window = line rate x T; default 1ms)"
    )
    parser.add_argument(
        "--mtu", type=int, choices=PATH_MTUS, help="RoCE path MTU (default: the largest the interface carries)"
    )
    parser.add_argument("--dev", help="network interface of this host's NIC (server/client)")
    parser.add_argument(
        "--store",
        default=os.path.join(tempfile.gettempdir(), "starpulse-roce-perf"),
        help="rendezvous directory shared by server and client",
    )
    parser.add_argument("--name", default="perf", help="session name in the store (default perf)")
    parser.add_argument(
        "--timeout",
        type=float_flag(0, MAX_TIMEOUT_S, lo_exclusive=True, unit="seconds"),
        default=120.0,
        help="seconds before giving up (default 120)",
    )
    parser.add_argument(
        "--qp-timeout",
        type=int_flag(1, 31),
        default=13,
        help="local ACK timeout exponent: 4.096 us * 2^N (default 13 = 33.5 ms)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    add_strict_fidelity_flag(parser)
    add_time_dilation_flag(parser, unset="$STARPULSE_TIME_DILATION, else 1")


def _pct(flag: str, value: float) -> float:
    if not 0.0 <= value <= 100.0:
        raise PerfArgError(f"{flag} {value}: must be a percentage within 0..100")
    return value


def _sizes(text: str, flag: str) -> list[int]:
    sizes = [parse_size_bytes(part, what=flag) for part in text.split(",") if part.strip()]
    if not sizes or any(s < 1 or s >= 1 << 31 for s in sizes):
        raise PerfArgError(f"{flag} {text!r}: expected sizes 1 .. 2G-1 bytes like 64,4K,1M")
    return sizes


def _positive(flag: str, value: int) -> int:
    if value < 1:
        raise PerfArgError(f"{flag} {value}: must be >= 1")
    return value


def _iters(args: argparse.Namespace) -> int:
    return _positive("--iters", DEFAULT_ITERS if args.iters is None else args.iters)


def _tx_depth(args: argparse.Namespace) -> int:
    return _positive("--tx-depth", DEFAULT_TX_DEPTH if args.tx_depth is None else args.tx_depth)


def _rd_atomic(args: argparse.Namespace) -> int:
    cap = query_device().max_qp_init_rd_atom
    if not 1 <= args.rd_atomic <= cap:
        raise PerfArgError(f"--rd-atomic {args.rd_atomic}: must be 1..{cap} (device max_qp_init_rd_atom)")
    return args.rd_atomic


def _nic(args: argparse.Namespace) -> tuple[SoftNic, int]:
    if not 1 <= args.qp_timeout <= 31:
        raise PerfArgError(f"--qp-timeout {args.qp_timeout}: must be 1..31 (4.096 us * 2^N)")
    if not args.dev:
        raise PerfArgError(f"perf {args.role}: --dev IFNAME is required (the interface of this host's NIC)")
    rate = parse_rate_bps(args.link_rate, what="--link-rate", max_bps=MAX_LINK_RATE_BPS)
    base_rtt_ns = _base_rtt_ns(args)
    ip = interface_ipv6(args.dev) if args.ipv6 else None
    nic = open_device(args.dev, line_rate_bps=rate, cc=args.cc, base_rtt_ns=base_rtt_ns, ip=ip)
    return nic, device_path_mtu(args.dev, nic.ip, args.mtu, flag="--mtu")


def _base_rtt_ns(args: argparse.Namespace) -> int:
    base_rtt_ns = parse_duration_ns(args.base_rtt, what="--base-rtt")
    if base_rtt_ns < 1000:
        raise PerfArgError(f"--base-rtt {args.base_rtt}: must be at least 1us")
    return base_rtt_ns


def _atomic_size(args: argparse.Namespace) -> None:
    """Atomics move 8 bytes: --size may only say so."""
    if args.op == "atomic" and args.size is not None and parse_size_bytes(args.size, what="--size") != ATOMIC_BYTES:
        raise PerfArgError(f"--size {args.size}: --op atomic works on {ATOMIC_BYTES}-byte words (drop --size)")


def _run_role(args: argparse.Namespace) -> dict[str, Any]:
    _atomic_size(args)
    rd_atomic = _rd_atomic(args)
    nic, mtu = _nic(args)
    store = FileStore(args.store)
    max_size = max(_sizes(args.size or args.sizes, "--size" if args.size else "--sizes"))
    timeout_ns = int(args.timeout * 1e9)
    if args.role == "server":
        return run_server(
            nic,
            store,
            args.name,
            max_size=max_size,
            path_mtu=mtu,
            qp_timeout=args.qp_timeout,
            idle_timeout_ns=timeout_ns,
            rd_atomic=rd_atomic,
        )
    cfg = PerfConfig(
        op=args.op,
        sizes=[ATOMIC_BYTES]
        if args.op == "atomic"
        else _sizes(args.size or args.sizes, "--size" if args.size else "--sizes"),
        iters=_iters(args),
        lat_iters=max(0, args.lat_iters),
        tx_depth=_tx_depth(args),
        path_mtu=mtu,
        timeout_ns=timeout_ns,
        qp_timeout=args.qp_timeout,
        rd_atomic=rd_atomic,
    )
    if args.size:  # --size: one message of that size, or --iters of them
        cfg.budget_bytes = max(cfg.sizes) * (1 if args.iters is None else cfg.iters)
    return PerfClient(nic, store, args.name, cfg).run()


def _print_table(report: dict[str, Any]) -> None:
    print(
        f"# {report['op']}  path MTU {report['path_mtu']}  cc {report['cc']}  "
        f"line rate {format_rate_bps(report['line_rate_bps'])}"
    )
    print(
        f"{'bytes':>9} {'iters':>6} {'BW':>12} {'Mmsg/s':>8} {'lat med us':>11} {'lat p99 us':>11} "
        f"{'retx':>6} {'ok':>3}"
    )
    for r in report["results"]:
        med = f"{r['lat_us_median']:.1f}" if "lat_us_median" in r else "-"
        p99 = f"{r['lat_us_p99']:.1f}" if "lat_us_p99" in r else "-"
        print(
            f"{format_size_bytes(r['size_bytes']):>9} {r['iters']:>6} {format_rate_bps(r['bw_bps']):>12} "
            f"{r['msg_rate'] / 1e6:>8.4f} {med:>11} {p99:>11} {r['retransmissions']:>6} "
            f"{'yes' if r['data_ok'] else 'NO':>3}"
        )


# --- selftest ----------------------------------------------------------------------------------------------
def _selftest_in_lab(
    args: argparse.Namespace, tmp: str, rate_bps: int, size: int, loss: float, dup: float, reorder: float
) -> tuple[dict[str, Any], str, dict[str, Any] | None]:
    """Two namespaces, one link (tbf, or the emu.wire emulator when impaired), server and client processes."""
    from emu.netns import NetnsLab  # the CLI is the top layer: emu only here, never in sw.roce
    from emu.wire import WireProfile

    clock = get_clock()
    wire_stats = Path(tmp) / "wire.json"
    with NetnsLab(clock=clock) as lab:
        h1, h2 = lab.add_host("h1"), lab.add_host("h2")
        addr: dict[str, Any] = {"mtu": SELFTEST_IF_MTU}
        if not args.ipv6:
            addr.update(addr_a=SELFTEST_ADDR4[0], addr_b=SELFTEST_ADDR4[1])
        if loss or dup or reorder:
            # Reordering needs frames in flight to overtake: give the link a delay of several frame times.
            profile = WireProfile(
                rate_bps=rate_bps,
                loss_pct=loss,
                dup_pct=dup,
                reorder_pct=reorder,
                delay_ns=REORDER_DELAY_NS if reorder else IMPAIRED_DELAY_NS,
            )
            lab.add_wired_link(
                h1, h2, profile, ifname_a="eth0", ifname_b="eth0", stats_path=str(wire_stats), **addr
            )
            link = "emu.wire"
        else:
            lab.add_link(h1, h2, ifname_a="eth0", ifname_b="eth0", **addr)
            for host in (h1, h2):
                lab.shape_rate(host, "eth0", rate_bps, burst_bytes=4 * SELFTEST_IF_MTU)
            link = "tbf"
        if args.ipv6:
            for host, a6 in zip((h1, h2), SELFTEST_ADDR6, strict=True):
                host.cmd("ip", "-6", "addr", "add", a6, "dev", "eth0", "nodad")
        common = [
            *(["--ipv6"] if args.ipv6 else []),
            "--dev",
            "eth0",
            "--store",
            tmp,
            "--name",
            "selftest",
            "--op",
            args.op,
            "--size",
            str(size),
            "--link-rate",
            str(rate_bps),
            "--cc",
            args.cc,
            "--timeout",
            str(args.timeout),
            "--qp-timeout",
            str(args.qp_timeout),
            "--base-rtt",
            args.base_rtt,
            "--rd-atomic",
            str(args.rd_atomic),
            "--json",
        ]
        if args.mtu:
            common += ["--mtu", str(args.mtu)]
        me = [sys.executable, "-m", "sw.apps.perf_selftest"]
        env = dict(os.environ, STARPULSE_TIME_DILATION=str(clock.dilation))
        server = h2.popen(
            [*me, "server", *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        if args.op == "atomic":  # many tiny operations: ops/s with --tx-depth in flight, then latency samples
            shape = ["--iters", str(_iters(args)), "--lat-iters", str(args.lat_iters)]
            shape += ["--tx-depth", str(_tx_depth(args))]
        elif args.iters is not None or args.tx_depth is not None:  # --iters messages, --tx-depth in flight
            iters = 1 if args.iters is None else _iters(args)
            shape = ["--iters", str(iters), "--lat-iters", "0", "--tx-depth", str(_tx_depth(args))]
        else:  # one transfer of --size
            shape = ["--iters", "1", "--lat-iters", "0", "--tx-depth", "1"]
        client = h1.popen(
            [*me, "client", *common, *shape],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            out, err = client.communicate(timeout=args.timeout + 60)
            server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            raise PerfArgError(
                f"selftest did not finish within {args.timeout + 60:g} s (raise --timeout or lower --size)"
            ) from None
        if client.returncode != 0:
            raise PerfError(f"perf client failed: {err.strip().splitlines()[-1] if err.strip() else '?'}")
        report = json.loads(out)
    wire_counters = json.loads(wire_stats.read_text()) if wire_stats.exists() else None
    return report, link, wire_counters


def _selftest(args: argparse.Namespace) -> dict[str, Any]:
    rate_bps = parse_rate_bps(args.link_rate, what="--link-rate", max_bps=MAX_LINK_RATE_BPS)
    _base_rtt_ns(args)
    _atomic_size(args)
    _rd_atomic(args)
    _iters(args)
    _tx_depth(args)
    default_size = str(ATOMIC_BYTES) if args.op == "atomic" else DEFAULT_SELFTEST_SIZE
    size = parse_size_bytes(args.size or default_size, what="--size")
    if not 1 <= size < 1 << 31:
        raise PerfArgError(f"--size {args.size}: must be 1 .. 2G-1 bytes")
    loss, dup, reorder = _pct("--loss", args.loss), _pct("--dup", args.dup), _pct("--reorder", args.reorder)
    from emu.reap import owned_tempdir  # named with its owner: a later run reaps it if this one is killed

    tmp = owned_tempdir("sp-roce-perf-")
    lag_dir = Path(tmp) / "lag"
    lag_dir.mkdir()
    os.environ[ENV_LAG_DIR] = str(lag_dir)      # both ends' NIC pacers and the link emulator report here
    try:
        report, link, wire_counters = _selftest_in_lab(args, str(tmp), rate_bps, size, loss, dup, reorder)
        lag = read_lag_dir(lag_dir)
        fid = fidelity(lag, get_clock().dilation)
    finally:
        del os.environ[ENV_LAG_DIR]
        shutil.rmtree(tmp, ignore_errors=True)
    row = report["results"][0]
    result: dict[str, Any] = {
        "goodput_bps": row["bw_bps"],
        "link_rate_bps": rate_bps,
        "retransmissions": row["retransmissions"],
        "data_ok": row["data_ok"],
        "op": args.op,
        "size_bytes": size,
        "iters": row["iters"],
        "tx_depth": report.get("tx_depth"),
        "max_rd_atomic": report.get("max_rd_atomic"),
        "path_mtu": report["path_mtu"],
        "cc": args.cc,
        "cc_feedback": {
            "none": "none",
            "dcqcn": "cnp (no ECN marking on this link)",
            "hpcc": "int unavailable on this link: model holds line rate",
        }[args.cc],
        "loss_pct": loss,
        "dup_pct": dup,
        "reorder_pct": reorder,
        "link": link,
        "link_delay_ns": (REORDER_DELAY_NS if reorder else IMPAIRED_DELAY_NS) if link == "emu.wire" else 0,
        "goodput_fraction": row["bw_bps"] / rate_bps,
        "elapsed_s": row["elapsed_s"],
        "timeouts": row["timeouts"],
        "pps_per_core": row["pps_per_core"],
        "time_dilation": get_clock().dilation,
        "client_counters": report["client_counters"],
        "server_counters": report["server_counters"],
        "client_port_counters": report["port_counters"],
        "server_port_counters": report["server_port_counters"],
    }
    result["ip_version"] = 6 if args.ipv6 else 4
    if args.op == "atomic":
        result["atomic_ops"] = row["iters"]
        result["atomic_ops_per_s"] = row["atomic_ops_per_s"]
        for key in ("lat_us_median", "lat_us_p99"):
            if key in row:
                result[key] = row[key]
    if wire_counters is not None:
        result["wire_counters"] = wire_counters
    result["fidelity"] = fid
    result["lag_components"] = component_summaries(lag)     # the figures behind the verdict, per component
    return result


PROBE_SIZE = "512K"  # --time-dilation auto: the selftest's probe transfer (at line rate) per dilation tried


def _use_dilation(k: float) -> None:
    """This process's clock and its children's ($STARPULSE_TIME_DILATION) at dilation ``k``."""
    os.environ[ENV_DILATION] = repr(float(k))
    set_clock(Clock(float(k)))


def _selftest_dilated(args: argparse.Namespace) -> dict[str, Any]:
    """``_selftest`` at ``--time-dilation`` K, or (``auto``) at the lowest dilation whose probe transfer (a
    ``PROBE_SIZE`` WRITE at line rate) kept every NIC pacer and link emulator within bounds (``emu.calibrate``)."""
    if args.time_dilation is None:
        return _selftest(args)
    if not isinstance(args.time_dilation, AutoDilation):
        _use_dilation(args.time_dilation)
        return _selftest(args)
    probe = argparse.Namespace(**{**vars(args), "op": "write", "size": PROBE_SIZE, "iters": None, "tx_depth": None})

    def attempt(k: float) -> dict[str, Any]:
        _use_dilation(k)
        return _selftest(probe)["fidelity"]

    auto = args.time_dilation
    k, _ = search_dilation(attempt, auto.ceiling, str(auto), echo=lambda line: print(line, file=sys.stderr, flush=True))
    _use_dilation(k)
    return _selftest(args)


def run_perf(args: argparse.Namespace) -> int:
    """Entry point of `starpulse roce perf`; returns the exit code (1 when the data did not verify)."""
    try:
        if args.selftest:
            if args.role:
                raise PerfArgError(f"perf --selftest runs both sides itself: drop {args.role!r}")
            result = _selftest_dilated(args)
            print(json.dumps(result, indent=None if args.json else 2))
            return (0 if result["data_ok"] else 1) or fidelity_exit(result["fidelity"], args.strict_fidelity)
        if not args.role:
            raise PerfArgError("perf: give a role (server or client) or --selftest")
        report = _run_role(args)
    except UnitError as exc:
        raise PerfArgError(str(exc)) from None
    if args.role == "server":
        if args.json:
            print(json.dumps(report))
        return 0
    if args.json:
        print(json.dumps(report))
    else:
        _print_table(report)
    return 0 if all(r["data_ok"] for r in report["results"]) else 1


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="starpulse roce perf", description=__doc__.splitlines()[0])
    add_perf_arguments(parser)
    return call_guarded("starpulse roce perf", run_perf, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
