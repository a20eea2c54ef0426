"""The demo's collectives plot: busbw per message size beside the busiest NIC's fraction of the line rate.

busbw (nccl-tests' bus bandwidth) of a hierarchical allreduce counts the intra-server hops too, which run over the
shared-memory NVLink stand-in, so it can reach 2x the per-rail line rate while no NIC carries more than the line
rate.  The left panel splits busbw into what the busiest NIC carried and the share of the NVLink stand-in (labelled
at the largest size); the right panel shows the busiest NIC's payload rate over the line rate (``nic_frac_line``).

    python -m sw.apps.demo_busbw_plot RESULTS_DIR    # bench_allreduce.json + bench_alltoall.json -> busbw_vs_size.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from sw.units.plot import plot_figure

PNG_NAME = "busbw_vs_size.png"


def nvlink_share(row: dict[str, Any]) -> float:
    """The fraction of a size's busbw that did not cross the busiest NIC: the intra-server (NVLink stand-in) hops."""
    return max(0.0, 1.0 - row["nic_bps"] / row["busbw_bps"]) if row["busbw_bps"] > 0 else 0.0


def plot_busbw(reports: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    """Two panels from ``starpulse bench -J`` reports by op name: busbw with the NIC / NVLink stand-in split, and
    the busiest NIC's fraction of the line rate, both per message size."""
    first = next(iter(reports.values()))
    line_mbps = first["line_rate_bps"] / 1e6
    with plot_figure(path, 1, 2, figsize=(13, 4.8), dpi=100) as (fig, (ax_bus, ax_nic)):
        for i, (op, rep) in enumerate(reports.items()):
            rows, color = rep["results"], f"C{i}"
            sizes = [r["size_bytes"] for r in rows]
            busbw = [r["busbw_bps"] / 1e6 for r in rows]
            nic = [r["nic_bps"] / 1e6 for r in rows]
            algos = "/".join(dict.fromkeys(r["algo"] for r in rows))
            ax_bus.plot(sizes, busbw, marker="o", color=color, label=f"{op} busbw ({algos})")
            ax_bus.plot(sizes, nic, marker=".", linestyle=":", color=color, label=f"{op}: busiest NIC")
            ax_bus.fill_between(sizes, nic, busbw, color=color, alpha=0.15,
                                label=f"{op}: NVLink stand-in share")
            share = nvlink_share(rows[-1])
            ax_bus.annotate(f"{share:.0%} of busbw: NVLink stand-in\n(intra-server shared memory)",
                            xy=(sizes[-1], (busbw[-1] + nic[-1]) / 2), xytext=(-12, 0), textcoords="offset points",
                            ha="right", va="center", fontsize=8, color=color)
            ax_nic.plot(sizes, [r["nic_frac_line"] for r in rows], marker="o", color=color, label=f"{op} ({algos})")
        ax_bus.axhline(line_mbps, linestyle="--", color="grey", label=f"line rate ({line_mbps:g} Mb/s)")
        ax_nic.axhline(1.0, linestyle="--", color="grey", label="line rate")
        intra = first.get("intra_rate_bps")
        ax_bus.set_title("busbw (counts intra-server hops)" + (f"; NVLink stand-in {intra / 1e6:g} Mb/s per rank"
                                                               if intra else ""), fontsize=10)
        ax_nic.set_title("busiest NIC's payload rate / line rate", fontsize=10)
        ax_bus.set_ylabel("Mb/s (network time)")
        top = max(r["busbw_bps"] for rep in reports.values() for r in rep["results"]) / 1e6
        ax_bus.set_ylim(0, max(top, line_mbps) * 1.6)   # from 0, and room for the legend above the curves
        ax_nic.set_ylabel("fraction of the per-rail line rate")
        ax_nic.set_ylim(0, 1.15)
        for ax in (ax_bus, ax_nic):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("message size (bytes)")
            ax.legend(fontsize=8, loc="lower right" if ax is ax_nic else "upper left", ncol=1 if ax is ax_nic else 2)
            ax.grid(alpha=0.3)
        fig.suptitle(title, fontsize=11)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m sw.apps.demo_busbw_plot RESULTS_DIR (with bench_allreduce.json, bench_alltoall.json)",
              file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    reports = {}
    for op in ("allreduce", "alltoall"):
        path = outdir / f"bench_{op}.json"
        try:
            reports[op] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"demo_busbw_plot: {path}: {exc}", file=sys.stderr)
            return 2
    rep = reports["allreduce"]
    plot_busbw(reports, outdir / PNG_NAME, f"RoCE + DCQCN collectives, {rep['servers']} servers, "
               f"{rep['world_size']} GPUs (dilation {rep.get('time_dilation', 1):g})")
    print(outdir / PNG_NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main())
