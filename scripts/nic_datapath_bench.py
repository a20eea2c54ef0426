"""Native vs Python host NIC data path (issue 23, item 4), ratios in one run; run as root.

    sudo .venv/bin/python scripts/nic_datapath_bench.py [--seconds S] [--fabric] [--softnic] [--pairs N] [--json]

``veth``: one process, one core: frames of one MTU-sized RDMA WRITE flow built + ICRC'd + sent on an AF_PACKET
socket of a veth pair made for the run (``tx``), and received + INT-less ICRC-checked on its peer (``rx``), by
each data path of ``sw.roce.native.datapath`` for ``S`` seconds; packets per CPU-second of this process
(``time.process_time``: benchmarks are not data path).  ``--fabric`` also runs ``fabric bench`` (4x2, all-to-all,
dilation 20) once per data path on one fabric and compares the NIC generators' CPU-seconds per million
packet-hops and the aggregate packet-hops per CPU-second (every component).  The load average is printed with
every figure: measured on a busy machine the ratios hold better than the absolute figures.

``--softnic``: the product's NIC, ``SoftNic`` with its RC logic, on each port of ``sw.roce.softnic.native_port``
(``RawSocketPort``: python; ``NativeRawSocketPort``: native): one process drives a sender and a receiver NIC over a
veth pair (RDMA WRITEs of 1 MiB, path MTU 1024, line rate 100 Gb/s so only the CPU limits), in ``N`` alternating
python/native pairs of ``S`` seconds each; NIC frames (sent + received, both NICs) per CPU-second of the process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from emu.netns import NetnsLab  # noqa: E402
from sw.roce.native.build import load  # noqa: E402
from sw.roce.native.datapath import NativeDatapath, PythonDatapath, RxCounts, TxFlow  # noqa: E402
from sw.roce.softnic.native_port import NativeRawSocketPort  # noqa: E402
from sw.roce.softnic.nic import SoftNic  # noqa: E402
from sw.roce.softnic.port import RawSocketPort  # noqa: E402
from sw.roce.transport.qp_connect import connect, qp_info  # noqa: E402
from sw.roce.transport.verbs import SendWr, WrOpcode  # noqa: E402
from sw.roce.wire.flow import Flow  # noqa: E402
from sw.roce.wire.opcodes import Opcode  # noqa: E402
from sw.roce.wire.template import PacketTemplate  # noqa: E402

PAYLOAD_BYTES = 1024
BURST = 64


def veth_rates(dp: Any, tx: RawSocketPort, rx: RawSocketPort, seconds: float) -> dict[str, float]:
    """Packets per CPU-second of sending (build + ICRC + send) and of receiving (recv + check) on one core."""
    flow = TxFlow(PacketTemplate(Flow(tx.mac, rx.mac, "10.0.0.1", "10.0.1.2", 0x101, 0x122),
                                 Opcode.RDMA_WRITE_MIDDLE), bytes(i & 0xFF for i in range(PAYLOAD_BYTES)))
    counts = RxCounts()
    tx_cpu = rx_cpu = 0.0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        c0 = time.process_time()
        for _ in range(8):
            dp.tx_burst(tx, flow, BURST)
        c1 = time.process_time()
        while dp.rx_poll(rx, counts):
            pass
        c2 = time.process_time()
        tx_cpu += c1 - c0
        rx_cpu += c2 - c1
    build_n, c0 = 0, time.process_time()
    build_end = time.perf_counter() + seconds / 4
    scratch = dp.ffi.new("uint8_t[]", len(flow.frame0) * BURST) if isinstance(dp, NativeDatapath) else None
    while time.perf_counter() < build_end:     # user-space work alone: build + ICRC into memory, no syscall
        if isinstance(dp, NativeDatapath):
            dp.lib.sp_build(flow.frame0, len(flow.frame0), build_n & 0xFFFFFF, BURST, scratch)
        else:
            for i in range(BURST):
                flow.template.build((build_n + i) & 0xFFFFFF, flow.payload)
        build_n += BURST
    build_cpu = time.process_time() - c0
    return {"build_pps_per_cpu_s": build_n / build_cpu,
            "tx_rx_pps_per_cpu_s": 1 / (tx_cpu / flow.frames + rx_cpu / max(counts.frames, 1)),
            "tx_pps_per_cpu_s": flow.frames / tx_cpu, "rx_pps_per_cpu_s": counts.frames / max(rx_cpu, 1e-9),
            "tx_frames": flow.frames, "rx_frames": counts.frames, "rx_good": counts.good,
            "rx_bad_icrc": counts.bad_icrc, "tx_errors": flow.errors}


def veth_bench(seconds: float) -> dict[str, Any]:
    module = load()
    if module is None:
        raise SystemExit("no native data path here (no C compiler): nothing to compare")
    with NetnsLab() as lab:
        a, b = f"{lab.prefix}x"[:15], f"{lab.prefix}y"[:15]
        lab.add_link(None, None, ifname_a=a, ifname_b=b, addr_a="10.0.0.1/24", addr_b="10.0.1.2/24")
        tx, rx = RawSocketPort(a, claim_udp_port=False), RawSocketPort(b, claim_udp_port=False)
        out = {dp.name: veth_rates(dp, tx, rx, seconds) for dp in (PythonDatapath(), NativeDatapath(module))}
        tx.close()
        rx.close()
    out["tx_ratio"] = out["native"]["tx_pps_per_cpu_s"] / out["python"]["tx_pps_per_cpu_s"]
    for key in ("build", "tx_rx"):
        out[f"{key}_ratio"] = out["native"][f"{key}_pps_per_cpu_s"] / out["python"][f"{key}_pps_per_cpu_s"]
    out["rx_ratio"] = out["native"]["rx_pps_per_cpu_s"] / out["python"]["rx_pps_per_cpu_s"]
    return out


def softnic_rate(module: Any, a_if: str, b_if: str, seconds: float) -> dict[str, float]:
    """NIC frames (tx + rx of both NICs) per CPU-second of one process driving a WRITE stream through two SoftNics
    on ports of the given data path (``module`` None: the Python ``RawSocketPort``)."""
    import numpy as np

    def port(ifname: str) -> RawSocketPort:
        if module is None:
            return RawSocketPort(ifname, claim_udp_port=False)
        return NativeRawSocketPort(ifname, module, claim_udp_port=False)

    pa, pb = port(a_if), port(b_if)
    a = SoftNic(pa, mac=pa.mac, ip=pa.ip, line_rate_bps=100 * 10**9)
    b = SoftNic(pb, mac=pb.mac, ip=pb.ip, line_rate_bps=100 * 10**9)
    pda, pdb = a.alloc_pd(), b.alloc_pd()
    cq = a.create_cq()
    qa, qb = a.create_qp(pda, cq), b.create_qp(pdb, b.create_cq())
    ia, ib = qp_info(qa, 100), qp_info(qb, 200)
    connect(qa, 100, ib, path_mtu=1024)
    connect(qb, 200, ia, path_mtu=1024)
    src, dst = np.ones(1 << 20, np.uint8), np.zeros(1 << 20, np.uint8)
    ms, md = pda.reg_mr(src), pdb.reg_mr(dst)
    posted = done = 0
    c0, end = time.process_time(), time.perf_counter() + seconds
    while time.perf_counter() < end:
        while posted - done < 2:
            qa.post_send(SendWr(posted, WrOpcode.RDMA_WRITE, ms.sge(), remote_addr=md.addr, rkey=md.rkey))
            posted += 1
        a.progress()
        b.progress()
        done += len(cq.poll(8))
    cpu_s = time.process_time() - c0
    frames = a.counters.tx_frames + a.counters.rx_frames + b.counters.tx_frames + b.counters.rx_frames
    out = {"nic_frames_per_cpu_s": frames / cpu_s, "data_frames_per_cpu_s": b.counters.qp_frames / cpu_s,
           "writes_done": done, "frames": frames, "cpu_s": cpu_s,
           "retransmits": a.qp_counters().get("retransmitted_packets", 0)}
    a.close()
    b.close()
    return out


def softnic_bench(seconds: float, pairs: int) -> dict[str, Any]:
    """``pairs`` alternating python/native runs of ``softnic_rate``; the ratio of the medians."""
    module = load()
    if module is None:
        raise SystemExit("no native data path here (no C compiler): nothing to compare")
    runs: dict[str, list[dict[str, float]]] = {"python": [], "native": []}
    with NetnsLab() as lab:
        a, b = f"{lab.prefix}x"[:15], f"{lab.prefix}y"[:15]
        lab.add_link(None, None, ifname_a=a, ifname_b=b, addr_a="10.0.0.1/24", addr_b="10.0.1.2/24")
        for _ in range(pairs):
            runs["python"].append(softnic_rate(None, a, b, seconds))
            runs["native"].append(softnic_rate(module, a, b, seconds))
    med = {k: sorted(r["nic_frames_per_cpu_s"] for r in v)[len(v) // 2] for k, v in runs.items()}
    return {"runs": runs, "median_nic_frames_per_cpu_s": med, "ratio": med["native"] / med["python"],
            "load_avg_1m": os.getloadavg()[0]}


def fabric_compare(seconds: float) -> dict[str, Any]:
    from emu.fabric import Fabric
    from emu.fabric_bench import run_once

    load()
    rows = {}
    with Fabric(servers=4, gpus_per_server=2, spines=2, link_rate="100M", time_dilation=20) as fab:
        for dp in ("python", "native"):
            r = run_once(fab, pattern="all-to-all", fraction=1.0, wall_s=seconds, datapath=dp)
            cpu_total = sum(c["cpu_s"] for c in r["cpu"].values())
            rows[dp] = {"packet_hops": r["packet_hops"], "forwarded_pkts_per_wall_s": r["forwarded_pkts_per_wall_s"],
                        "nic_cpu_s_per_m_packet_hops": r["cpu"]["nics"]["cpu_s_per_m_packet_hops"],
                        "switch_cpu_s_per_m_packet_hops": r["cpu"]["switches"]["cpu_s_per_m_packet_hops"],
                        "packet_hops_per_cpu_s": r["packet_hops"] / cpu_total, "fidelity_ok": r["fidelity"]["ok"],
                        "load_avg_1m": os.getloadavg()[0]}
    py, nat = rows["python"], rows["native"]
    rows["nic_cpu_ratio"] = py["nic_cpu_s_per_m_packet_hops"] / nat["nic_cpu_s_per_m_packet_hops"]
    rows["packet_hops_per_cpu_s_ratio"] = nat["packet_hops_per_cpu_s"] / py["packet_hops_per_cpu_s"]
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0, help="seconds per data path (default 3)")
    p.add_argument("--fabric", action="store_true", help="also compare on a 4x2 fabric under fabric bench")
    p.add_argument("--softnic", action="store_true", help="only the SoftNic (RC logic) on each port, in pairs")
    p.add_argument("--pairs", type=int, default=3, help="--softnic: alternating python/native pairs (default 3)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if os.geteuid() != 0:
        print("nic_datapath_bench: needs root (veth pair, raw sockets)", file=sys.stderr)
        return 2
    if args.pairs < 1 or args.seconds <= 0:
        print("nic_datapath_bench: --pairs must be >= 1 and --seconds > 0", file=sys.stderr)
        return 2
    if args.softnic:
        load_before = os.getloadavg()[0]
        r = softnic_bench(args.seconds, args.pairs)
        r["load_avg_1m_before"] = load_before
        if args.json:
            print(json.dumps(r, indent=1))
            return 0
        m = r["median_nic_frames_per_cpu_s"]
        print(f"SoftNic frames per CPU-second (median of {args.pairs} pairs): python {m['python']:,.0f}, native "
              f"{m['native']:,.0f}: x{r['ratio']:.2f} (load {load_before:.1f} -> {r['load_avg_1m']:.1f})")
        return 0
    result: dict[str, Any] = {"load_avg_1m_before": os.getloadavg()[0], "veth": veth_bench(args.seconds)}
    if args.fabric:
        result["fabric"] = fabric_compare(args.seconds)
    result["load_avg_1m_after"] = os.getloadavg()[0]
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    v = result["veth"]
    for name in ("python", "native"):
        print(f"{name:>6}: build {v[name]['build_pps_per_cpu_s']:,.0f}, tx {v[name]['tx_pps_per_cpu_s']:,.0f}, "
              f"rx {v[name]['rx_pps_per_cpu_s']:,.0f} pkt/CPU-s")
    print(f"native/python: build x{v['build_ratio']:.1f}, tx x{v['tx_ratio']:.1f}, rx x{v['rx_ratio']:.1f}, "
          f"tx+rx per packet x{v['tx_rx_ratio']:.1f} (load {result['load_avg_1m_before']:.1f})")
    if "fabric" in result:
        f = result["fabric"]
        print(f"fabric bench 4x2: NIC CPU-s per M packet-hops python {f['python']['nic_cpu_s_per_m_packet_hops']}, "
              f"native {f['native']['nic_cpu_s_per_m_packet_hops']} (x{f['nic_cpu_ratio']:.1f}); packet-hops per "
              f"CPU-s (all components) x{f['packet_hops_per_cpu_s_ratio']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
