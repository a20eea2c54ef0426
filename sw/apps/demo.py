"""StarPulse Lab end-to-end demo: every working layer exercised once, figures printed, results + plots written.

Steps run in order with a progress display; each returns a dict of figures that lands in results/demo/summary.json.
A failing step is reported and makes the demo exit non-zero; the others still run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from sw.clock.lag import combine_fidelity, fidelity_exit
from sw.collectives.fabric_topology import DEFAULT_FABRIC_MTU
from sw.units.plot import plot_figure

ROOT = Path(__file__).resolve().parents[2]
STARPULSE = [sys.executable, "-m", "sw.cli"]


def _run(argv: list[str], timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` exited {out.returncode}: {out.stderr.strip()[-800:]}")
    return out


def step_doctor(outdir: Path) -> dict:
    """Every external piece present (root, netns, mnexec, simulators, tshark)."""
    report = json.loads(_run([*STARPULSE, "doctor", "--json"]).stdout)
    return {"ok": report["ok"], "missing": [c["name"] for c in report["checks"] if c["required"] and not c["ok"]]}


def step_roce_wire(outdir: Path) -> dict:
    """One pcap per RoCEv2 opcode, each dissected by tshark as InfiniBand-over-UDP with a good ICRC."""
    pcap_dir = outdir / "roce-pcaps"
    shutil.rmtree(pcap_dir, ignore_errors=True)
    paths = _run([*STARPULSE, "roce", "pcap", str(pcap_dir)]).stdout.split()
    dissected = 0
    for path in paths:
        out = _run(["tshark", "-r", path, "-T", "fields", "-e", "infiniband.bth.opcode"], timeout_s=60)
        dissected += sum(1 for line in out.stdout.splitlines() if line.strip())
    return {"pcaps": len(paths), "packets_dissected_by_tshark": dissected, "dir": str(pcap_dir)}


def step_roce_bench(outdir: Path) -> dict:
    """Packets/s of Scapy vs the template fast path (one core)."""
    result = json.loads(_run([*STARPULSE, "roce", "bench", "--seconds", "1", "--json"]).stdout)
    return {k: result[k] for k in ("scapy_pps", "template_pps", "decode_pps") if k in result}


def step_roce_perf(outdir: Path) -> dict:
    """RDMA WRITE of 16 MiB between two namespaces over a 100 Mb/s shaped link, DCQCN on, data verified."""
    result = json.loads(_run([*STARPULSE, "roce", "perf", "--selftest", "--op", "write", "--size", "16M",
                              "--link-rate", "100M", "--cc", "dcqcn", "--time-dilation", "auto", "--json"]).stdout)
    if not result["data_ok"]:
        raise RuntimeError("RDMA WRITE data did not verify")
    return {k: result[k] for k in ("goodput_bps", "link_rate_bps", "goodput_fraction", "retransmissions",
                                   "data_ok", "pps_per_core", "fidelity")}


def step_fabric(outdir: Path) -> dict:
    """Default fabric (4 servers x 2 rails x 2 spines of P4 switches): reachability, INT hops, ECMP, reroute, ECN."""
    out = subprocess.run([*STARPULSE, "fabric", "test", "--json"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    report = json.loads(out.stdout)
    (outdir / "fabric_test.json").write_text(json.dumps(report, indent=2))
    failed = [c["name"] for c in report["checks"] if not c["ok"]]
    if out.returncode != 0 or failed:
        raise RuntimeError(f"fabric checks failed: {failed}")
    return {"checks_passed": len(report["checks"]), "up_s": round(report["up_s"], 2),
            "down_s": round(report["down_s"], 2), **report["totals"]}


COLL_DILATION = "auto"
"""Each bench calibrates its dilation on its fabric before measuring (emu.calibrate): the lowest at which the
switches keep up with line rate on this machine as loaded now; the chosen one is in the JSON and the summary."""


def _bench(outdir: Path, op: str, sweep: list[str]) -> dict:
    """One `starpulse bench OP` on its own default fabric (4 servers x 2 rails x 2 spines, 100 Mb/s links, jumbo
    frames) over the RoCE transport with DCQCN, the switches marking ECN."""
    out_json = outdir / f"bench_{op}.json"
    _run([*STARPULSE, "bench", op, *sweep, "-n", "2", "-w", "1", "--net", "roce",
          "--time-dilation", COLL_DILATION, "-J", str(out_json)], timeout_s=900)
    report = json.loads(out_json.read_text())
    if report["wrong"]:
        raise RuntimeError(f"{op}: {report['wrong']} wrong elements")
    return report


def step_collectives(outdir: Path) -> dict:
    """Allreduce sweep and all-to-all over the P4 fabric on RoCE + DCQCN (figures in network time)."""
    allreduce = _bench(outdir, "allreduce", ["-b", "256K", "-e", "4M", "-f", "4"])
    alltoall = _bench(outdir, "alltoall", ["-b", "1M", "-e", "1M"])
    from sw.apps.demo_busbw_plot import PNG_NAME, nvlink_share, plot_busbw

    try:   # busbw beside the busiest NIC's fraction of line rate, the NVLink stand-in's share labelled
        plot_busbw({"allreduce": allreduce, "alltoall": alltoall}, outdir / PNG_NAME,
                   f"RoCE + DCQCN collectives, 4 servers x 2 rails x 2 spines (dilation "
                   f"{allreduce['time_dilation']:g}/{alltoall['time_dilation']:g})")
    except ImportError:
        pass
    figures: dict = {"net": allreduce.get("net", "roce"), "link_rate_bps": allreduce["line_rate_bps"],
                     "time_dilation": {"allreduce": allreduce["time_dilation"],
                                       "alltoall": alltoall["time_dilation"]}, "mtu": DEFAULT_FABRIC_MTU}
    for name, rep in (("allreduce", allreduce), ("alltoall", alltoall)):
        figures[name] = {
            "size_bytes": rep["max_size_bytes"], "algo": rep["results"][-1]["algo"],
            "busbw_over_line": round(rep["max_size_busbw_frac_line"], 3),
            "busiest_nic_over_line": round(rep.get("max_size_nic_frac_line") or 0.0, 3),
            "busbw_share_nvlink_stand_in": round(nvlink_share(rep["results"][-1]), 3),
            "drops": rep["drops"], "ecn_marks": rep["ecn_marks"]}
    figures["drops"] = allreduce["drops"] + alltoall["drops"]
    figures["ecn_marks"] = allreduce["ecn_marks"] + alltoall["ecn_marks"]
    figures["fidelity"] = combine_fidelity([allreduce["fidelity"], alltoall["fidelity"]])
    return figures


def step_cc_incast(outdir: Path) -> dict:
    """8->1 incast on one 25G bottleneck with DCQCN, HPCC and no CC (the sw.cc golden models, closed loop)."""
    from sw.cc.sim import SimConfig, simulate

    figures: dict[str, dict] = {}
    traces: dict[str, list[int]] = {}
    for cc in ("none", "dcqcn", "hpcc"):
        res = simulate(SimConfig(n_flows=8, cc=cc, link_kbps=25_000_000, duration_ns=20_000_000,
                                 warmup_ns=5_000_000, sample_ns=20_000))
        figures[cc] = {"utilization": round(res.utilization, 4), "jain": round(res.jain, 4), "drops": res.drops,
                       "max_queue_bytes": res.max_queue_bytes, "ecn_marks": res.marks}
        traces[cc] = res.queue_samples_bytes
    try:
        with plot_figure(outdir / "incast_queue.png", figsize=(8, 4), dpi=100) as (_, ax):
            for cc, samples in traces.items():
                ax.plot([i * 20 for i in range(len(samples))], [s / 1000 for s in samples], label=cc)
            ax.set_xlabel("time (µs)")
            ax.set_ylabel("bottleneck queue (KB)")
            ax.set_title("8→1 incast, 25 Gb/s bottleneck (sw.cc golden models)")
            ax.legend()
    except ImportError:
        pass
    return figures


STEPS: list[tuple[str, Callable[[Path], dict]]] = [
    ("doctor", step_doctor),
    ("roce wire format", step_roce_wire),
    ("roce template bench", step_roce_bench),
    ("roce RDMA WRITE over two namespaces", step_roce_perf),
    ("P4 fabric test", step_fabric),
    ("collectives on the fabric", step_collectives),
    ("congestion control incast", step_cc_incast),
]


def _flatten(figures: dict, prefix: str = "") -> list[str]:
    """Figures as short ``key=value`` items (nested dicts dotted, floats to 3 significant digits)."""
    items = []
    for key, value in figures.items():
        if isinstance(value, dict):
            items += _flatten(value, f"{prefix}{key}.")
        elif isinstance(value, float):
            items.append(f"{prefix}{key}={value:.3g}")
        else:
            items.append(f"{prefix}{key}={value}")
    return items


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "results" / "demo"), help="results directory")
    args = parser.parse_args(argv)
    outdir = Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    console = Console()
    summary: dict[str, dict] = {}
    failed: list[str] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("StarPulse demo", total=len(STEPS))
        for name, fn in STEPS:
            progress.update(task, description=f"demo: {name}")
            start = time.monotonic()
            try:
                figures = fn(outdir)
                summary[name] = {"ok": True, "seconds": round(time.monotonic() - start, 2), **figures}
            except Exception as exc:  # a failing step is reported, the others still run
                failed.append(name)
                summary[name] = {"ok": False, "error": str(exc), "trace": traceback.format_exc(limit=3)}
            progress.advance(task)
    table = Table(title="StarPulse Lab demo")
    table.add_column("step")
    table.add_column("result")
    table.add_column("figures")
    for name, data in summary.items():
        figures = {k: v for k, v in data.items() if k not in ("ok", "trace", "seconds")}
        table.add_row(name, "[green]ok[/]" if data["ok"] else "[red]FAILED[/]", "  ".join(_flatten(figures)))
    console.print(table)
    # the emulated figures' verdict over every step that ran on the emulator (sw.clock.lag)
    verdicts = [data["fidelity"] for data in summary.values() if data.get("fidelity")]
    fid = combine_fidelity(verdicts) if verdicts else None
    (outdir / "summary.json").write_text(json.dumps({**summary, "fidelity": fid}, indent=2))
    fidelity_exit(fid, strict=False)
    console.print(f"results: {outdir / 'summary.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
