"""Rail-aligned vs pairwise all-to-all on the emulated fabric: interleaved runs (A B B A ...) in one job, with
the time, the bytes per link class, the bytes through the spines and over each leaf uplink (ECMP balance), the
switch packet traversals, drops and the machine load of every sample, and the NIC lower bound both share.

    .venv/bin/python scripts/bench_alltoall_rail.py --sizes 1M,4M --rounds 3 --oversubscription 1,2,4

For each oversubscription it brings up its own fabric (``starpulse fabric up --name ...``), runs every rank
through ``starpulse run`` (this file with ``rank``), prints medians and tears the fabric down.  Times are network
time (``sw.clock``, dilation ``--time-dilation``).  ``--intra-ratio`` sets the shared-memory ("NVLink") rate per
rank to that multiple of the link rate (default 9, as ``starpulse run``: H100 NVLink 450 GB/s per direction vs a
400 Gb/s NIC; 0 means the library's stand-alone default of 20 Gb/s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sw.units import ETH_WIRE_OVERHEAD_BYTES, ROCE_DATA_FRAME_OVERHEAD_BYTES, parse_rate_bps, parse_size_bytes  # noqa: E402

ALGOS = ("pairwise", "rail")
ETH_IP_TCP_OVERHEAD = (1500 + 14) / (1500 - 52)
"""Wire bytes per TCP payload byte at MTU 1500 (Ethernet 14, IPv4 20, TCP 20 + timestamps 12)."""
ROCE_FRAME_EXTRA_BYTES = ROCE_DATA_FRAME_OVERHEAD_BYTES + ETH_WIRE_OVERHEAD_BYTES
"""Bytes a RoCEv2 SEND frame adds to its payload on the wire: its headers and ICRC, and the preamble, delimiter, FCS
and gap the transport's wire pacer charges."""


def wire_overhead(net: str, mtu: int) -> float:
    """Wire bytes per payload byte of the ranks' transport (RoCE: full frames of the path MTU)."""
    if net == "tcp":
        return ETH_IP_TCP_OVERHEAD
    from sw.roce.softnic.port import path_mtu_for

    pmtu = path_mtu_for(mtu)
    return (pmtu + ROCE_FRAME_EXTRA_BYTES) / pmtu
STARPULSE = str(REPO / ".venv" / "bin" / "starpulse")


# --- one rank (run by `starpulse run`) ------------------------------------------------------------------------
def _status(name: str) -> dict[str, Any] | None:
    from emu.fabric_daemon import request

    return request(name, {"op": "status"})["status"]


def _fabric_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Per-op fabric figures from two status snapshots: spine bytes, leaf-uplink bytes, switch packets, drops."""
    spine_tx, uplinks, pkts, drops, marks = 0, [], 0, 0, 0
    where = {"to_host": 0, "leaf_up": 0, "spine_down": 0}
    for sw, info in after["switches"].items():
        for port, p in info["ports"].items():
            b = before["switches"][sw]["ports"][port]
            d = {k: int(p[k]) - int(b[k]) for k in ("tx_bytes", "rx_pkts", "queue_drop_pkts", "ecn_marks")}
            pkts += d["rx_pkts"]
            drops += d["queue_drop_pkts"]
            marks += d["ecn_marks"]
            if sw.startswith("sp"):
                spine_tx += d["tx_bytes"]
                where["spine_down"] += d["queue_drop_pkts"]
            elif str(p.get("peer", "")).startswith("sp"):
                uplinks.append(d["tx_bytes"])
                where["leaf_up"] += d["queue_drop_pkts"]
            else:
                where["to_host"] += d["queue_drop_pkts"]
    return {"spine_tx_bytes": spine_tx, "uplink_tx_bytes": uplinks, "switch_rx_pkts": pkts, "drops": drops,
            "drops_where": where, "ecn_marks": marks}


def _tcp_counters() -> list[int]:
    """This network namespace's TCP retransmitted segments and retransmission timeouts (kernel counters)."""
    def table(path: str, section: str) -> dict[str, int]:
        lines = [ln.split() for ln in Path(path).read_text().splitlines() if ln.startswith(section + ":")]
        return {k: int(v) for k, v in zip(lines[0][1:], lines[1][1:], strict=True)} if len(lines) >= 2 else {}
    snmp, ext = table("/proc/net/snmp", "Tcp"), table("/proc/net/netstat", "TcpExt")
    return [snmp.get("RetransSegs", 0), ext.get("TCPTimeouts", 0)]


def rank_main(args: argparse.Namespace) -> int:
    import numpy as np

    from sw.clock import get_clock
    from sw.collectives import init_from_env
    from sw.collectives.algorithms.alltoall import rail_alltoall

    clock = get_clock()
    out: dict[str, Any] = {"samples": [], "checks": [], "traces": []}
    with init_from_env() as comm:
        n, me = comm.world_size, comm.rank
        lead = me == 0

        def vmax(x: float) -> int:
            buf = np.array([round(x)], np.int64)
            comm.allreduce(buf, op="max")
            return int(buf[0])

        def vsum(values: list[int]) -> list[int]:
            buf = np.array(values, np.int64)
            comm.allreduce(buf, op="sum")
            return [int(v) for v in buf]

        for size in [parse_size_bytes(s, what="--sizes") for s in args.sizes.split(",")]:
            count = max(n, (size // 4) - (size // 4) % n)
            block = count // n
            inputs = [np.random.default_rng([7, r, count]).integers(-2**31, 2**31, count, dtype=np.int64)
                      .astype(np.int32) for r in range(n)]
            send, recv = inputs[me], np.zeros(count, np.int32)
            want = np.concatenate([inputs[src][me * block:(me + 1) * block] for src in range(n)])
            for algo in ALGOS:   # warm-up doubles as the exactness check (bitwise, int32)
                recv[...] = 0
                comm.alltoall(send, recv, algo=algo)
                wrong = vsum([int(np.count_nonzero(recv != want))])[0]
                out["checks"].append({"size_bytes": count * 4, "algo": algo, "wrong": wrong})
            trace: dict[str, int] = {}
            comm._submit("alltoall(rail, traced)", comm._tag("alltoall", "int32"),  # the communicator's own stream
                         lambda s=send, d=recv, t=trace: rail_alltoall(comm.net, s, d, t), False)
            out["traces"].append({"size_bytes": count * 4, "staged_ns": vmax(trace["staged_ns"]),
                                  "end_ns": vmax(trace["end_ns"])})
            for r in range(args.rounds):
                for algo in ALGOS if r % 2 == 0 else ALGOS[::-1]:
                    comm.barrier()
                    before = _status(args.fabric_name) if lead else None
                    load = os.getloadavg()[0]
                    tcp0 = _tcp_counters() if comm.local_rank == 0 else [0, 0]  # one reader per namespace
                    comm.barrier()
                    comm.reset_counters()
                    t0 = clock.now_ns()
                    comm.alltoall(send, recv, algo=algo)
                    local_ns = clock.now_ns() - t0
                    counters = comm.counters()
                    comm.barrier()
                    after = _status(args.fabric_name) if lead else None
                    tcp1 = _tcp_counters() if comm.local_rank == 0 else [0, 0]
                    time_ns = vmax(local_ns)
                    link = dict(zip(("intra", "rail", "cross"),
                                    vsum([counters["intra"], counters["rail"], counters["cross"]]), strict=True))
                    retrans, timeouts = vsum([tcp1[0] - tcp0[0], tcp1[1] - tcp0[1]])
                    if lead:
                        assert before is not None and after is not None
                        out["samples"].append({"size_bytes": count * 4, "algo": algo, "round": r,
                                               "time_ns": time_ns, "payload_bytes": link, "load1": load,
                                               "tcp_retrans_segs": retrans, "tcp_timeouts": timeouts,
                                               **_fabric_delta(before, after)})
        if lead:
            Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


# --- the driver ---------------------------------------------------------------------------------------------
def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _where(ss: list[dict[str, Any]]) -> str:
    """Median drops at host-facing leaf ports / leaf uplinks / spine ports."""
    keys = ("to_host", "leaf_up", "spine_down")
    return "/".join(f"{_median([s.get('drops_where', {}).get(k, 0) for s in ss]):.0f}" for k in keys)


def summarize(result: dict[str, Any], servers: int, gpus: int, link_rate_bps: float, spines: int = 2,
              oversub: float = 1.0, overhead: float = ETH_IP_TCP_OVERHEAD) -> list[str]:
    """Table rows: medians per size and algorithm, the NIC lower bound, the busiest leaf uplink's bound (its
    measured bytes at the uplink rate: ECMP balance and oversubscription), and the rail-aligned gain."""
    uplink_bps = servers * link_rate_bps / (spines * oversub) if spines else 0.0
    lines = []
    for c in result["checks"]:
        if c["wrong"]:
            lines.append(f"!! {c['algo']} at {c['size_bytes']} B: {c['wrong']} wrong elements")
    sizes = sorted({s["size_bytes"] for s in result["samples"]})
    lines.append(f"{'size':>9} {'algo':>9} {'time ms':>9} {'(min-max)':>15} {'spine KB':>9} {'uplinks KB':>24} "
                 f"{'sw pkts':>8} {'drops':>6} {'h/u/s':>14} {'ECN':>6} {'rtx':>5} {'RTO':>4} {'load':>5}")
    for size in sizes:
        block = size // (servers * gpus)
        nic_bytes = (servers - 1) * gpus * block
        bound_ms = nic_bytes * 8 * overhead / link_rate_bps * 1e3
        med = {}
        for algo in ALGOS:
            ss = [s for s in result["samples"] if s["size_bytes"] == size and s["algo"] == algo]
            if not ss:
                continue
            t = [s["time_ns"] / 1e6 for s in ss]
            med[algo] = _median(t)
            up = [_median([s["uplink_tx_bytes"][k] for s in ss]) / 1e3 for k in range(len(ss[0]["uplink_tx_bytes"]))]
            lines.append(f"{size:>9} {algo:>9} {med[algo]:9.1f} {min(t):7.1f}-{max(t):<7.1f} "
                         f"{_median([s['spine_tx_bytes'] for s in ss]) / 1e3:9.1f} "
                         f"{'/'.join(f'{u:.0f}' for u in up):>24} {_median([s['switch_rx_pkts'] for s in ss]):8.0f} "
                         f"{_median([s['drops'] for s in ss]):6.0f} {_where(ss):>14} "
                         f"{_median([s['ecn_marks'] for s in ss]):6.0f} "
                         f"{_median([s.get('tcp_retrans_segs', 0) for s in ss]):5.0f} "
                         f"{_median([s.get('tcp_timeouts', 0) for s in ss]):4.0f} "
                         f"{_median([s['load1'] for s in ss]):5.1f}")
            if uplink_bps and max(up, default=0) >= 10:  # KB; control packets (barriers) aside
                lines.append(f"{'':>9} {algo:>9} busiest leaf uplink {max(up):.0f} KB at {uplink_bps / 1e6:g} Mb/s "
                             f"-> at least {max(up) * 8e3 / uplink_bps * 1e3:.1f} ms")
        tr = [x for x in result["traces"] if x["size_bytes"] == size]
        if tr:
            lines.append(f"{'':>9} rail trace: intra shuffle landed at {tr[0]['staged_ns'] / 1e6:.1f} ms of "
                         f"{tr[0]['end_ns'] / 1e6:.1f} ms")
        lines.append(f"{'':>9} NIC bound (both): {nic_bytes} B per NIC -> {bound_ms:.1f} ms on the wire")
        if len(med) == 2:
            gain = 1 - med["rail"] / med["pairwise"]
            best = 1 - bound_ms / med["pairwise"]
            lines.append(f"{'':>9} rail-aligned {gain * 100:+.1f} % vs pairwise (any algorithm can gain at most "
                         f"{best * 100:.1f} % here: pairwise is at {bound_ms / med['pairwise']:.3f} of the bound)")
    return lines


def _wait_up(name: str, proc: subprocess.Popen[bytes], env: dict[str, str], timeout_s: float = 120.0) -> None:
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise SystemExit(f"fabric {name!r} exited with {proc.returncode} before it was up")
        probe = subprocess.run([STARPULSE, "fabric", "status", "--name", name, "--json"], env=env,
                               capture_output=True)
        if probe.returncode == 0:
            return
        time.sleep(1.0)
    raise SystemExit(f"fabric {name!r} not up after {timeout_s:.0f} s")


def run_one(args: argparse.Namespace, oversub: float, json_path: str) -> dict[str, Any]:
    """Bring up a fabric at ``oversub``, run the interleaved job on it, tear it down; rank 0's JSON."""
    env = dict(os.environ, STARPULSE_TIME_DILATION=repr(float(args.time_dilation)))
    if args.net:
        env["STARPULSE_NET"] = args.net
    link_bps = parse_rate_bps(args.link_rate, what="--link-rate")
    env["STARPULSE_INTRA_RATE"] = str(int(args.intra_ratio * link_bps if args.intra_ratio > 0 else 20e9))
    topo = ["--servers", str(args.servers), "--gpus-per-server", str(args.gpus), "--spines", str(args.spines),
            "--link-rate", args.link_rate, "--oversubscription", repr(oversub), "--mtu", str(args.mtu)]
    name = args.name
    fabric = subprocess.Popen([STARPULSE, "fabric", "up", "--name", name, *topo], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_up(name, fabric, env)
        rank = [STARPULSE, "run", "--name", name, "--time-dilation", repr(float(args.time_dilation)),
                "--timeout", str(args.timeout), "--quiet", "--", "python", str(Path(__file__).resolve()), "rank",
                "--sizes", args.sizes, "--rounds", str(args.rounds), "--fabric-name", name, "--json", json_path]
        job = subprocess.run(rank, env=env)
        if job.returncode != 0:
            raise SystemExit(f"the job failed (exit {job.returncode})")
        return json.loads(Path(json_path).read_text())
    finally:
        subprocess.run([STARPULSE, "fabric", "down", "--name", name], env=env, capture_output=True)
        try:
            fabric.wait(timeout=60)
        except subprocess.TimeoutExpired:
            fabric.terminate()
            fabric.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="mode")
    r = sub.add_parser("rank", help="(internal) one rank of the job")
    for p in (parser, r):
        p.add_argument("--sizes", default="1M", help="comma-separated sizes per rank (default 1M)")
        p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per size (default 3)")
    r.add_argument("--fabric-name", required=True)
    r.add_argument("--json", required=True)
    parser.add_argument("--oversubscription", default="1", help="comma-separated values (default 1)")
    parser.add_argument("--time-dilation", type=float, default=50.0, help="K (default 50)")
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--spines", type=int, default=2)
    parser.add_argument("--link-rate", default="100M")
    parser.add_argument("--mtu", type=int, default=9000, help="fabric MTU (default 9000: jumbo frames, as the demo)")
    parser.add_argument("--intra-ratio", type=float, default=9.0,
                        help="shared-memory rate / link rate (default 9; 0 = library default 20 Gb/s)")
    parser.add_argument("--net", choices=("roce", "tcp"), default=None,
                        help="inter-server transport of the ranks (default: the launcher's, RoCE)")
    parser.add_argument("--name", default="a2arail", help="fabric name (default a2arail)")
    parser.add_argument("--timeout", type=float, default=3000.0, help="job timeout in wall seconds")
    parser.add_argument("-J", "--output", default=None, help="write every sample as JSON here")
    args = parser.parse_args(argv)
    if args.mode == "rank":
        return rank_main(args)
    report: dict[str, Any] = {"args": vars(args), "runs": []}
    for oversub in [float(x) for x in args.oversubscription.split(",")]:
        with tempfile.TemporaryDirectory(prefix="a2arail-") as tmp:
            os.chmod(tmp, 0o755)
            result = run_one(args, oversub, str(Path(tmp) / "rank0.json"))
        report["runs"].append({"oversubscription": oversub, **result})
        print(f"# {args.servers} servers x {args.gpus} GPUs, {args.spines} spines, oversubscription {oversub:g}, "
              f"links {args.link_rate}, MTU {args.mtu}, net {args.net or 'default (roce)'}, "
              f"dilation {args.time_dilation:g}, "
              f"intra/link {args.intra_ratio:g}, "
              f"{args.rounds} rounds (A B B A ...)", flush=True)
        for line in summarize(result, args.servers, args.gpus, parse_rate_bps(args.link_rate, what="--link-rate"),
                              args.spines, oversub, wire_overhead(args.net or "roce", args.mtu)):
            print(line, flush=True)
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
