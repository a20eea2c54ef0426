"""Cost of the emulated fabric by size: up, the full ``fabric test`` and down wall time, and peak memory.

    sudo python scripts/fabric_scale.py [--nics 16,64,128,256] [--json] [--plot scale.png]

Per size (4 NICs per server; 2 spines up to 64 NICs, else 4; 2 pods from 256 NICs): wall seconds of ``up``,
the checks of ``fabric test`` and ``down``, the peak RSS summed over the fabric's processes (every descendant of
this one, sampled), which checks failed and the fidelity verdict; then the fitted growth exponent of each in the
number of NICs, with the machine's load (figures move with it).  Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GPUS_PER_SERVER = 4
SAMPLE_S = 0.25
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MEASURES = ("up_s", "test_s", "down_s", "peak_rss_bytes")


def topology(nics: int) -> dict[str, int]:
    """The fabric of ``nics`` NICs: 4 per server, 2 spines up to 64 NICs else 4, 2 pods from 256."""
    return {"servers": nics // GPUS_PER_SERVER, "gpus_per_server": GPUS_PER_SERVER,
            "spines": 2 if nics <= 64 else 4, "pods": 2 if nics >= 256 else 1}


def descendants_rss_bytes(root_pid: int) -> int:
    """RSS summed over every descendant process of ``root_pid`` (not itself)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0, list(children.get(root_pid, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue
    return total


class PeakRss:
    """Samples ``descendants_rss_bytes`` of this process in a thread; ``peak`` is the largest sum seen."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self.peak = max(self.peak, descendants_rss_bytes(os.getpid()))

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(nics: int) -> dict[str, Any]:
    """One size: up, the checks of ``fabric test``, down; wall seconds, peak RSS, failed checks, fidelity."""
    from emu.checks import run_checks
    from emu.fabric import Fabric
    from sw.collectives.fabric_topology import TopologySpec

    row: dict[str, Any] = {"nics": nics, **topology(nics)}
    fab = Fabric(TopologySpec(**topology(nics)))
    with PeakRss() as rss:
        try:
            t = time.perf_counter()
            fab.up()
            row["up_s"] = time.perf_counter() - t
            t = time.perf_counter()
            checks = run_checks(fab)
            row["test_s"] = time.perf_counter() - t
            row["failed_checks"] = {c.name: c.detail for c in checks if not c.ok}
            row["fidelity"] = fab.fidelity()
        finally:
            t = time.perf_counter()
            fab.down()
            row["down_s"] = time.perf_counter() - t
    row["peak_rss_bytes"] = rss.peak
    return row


def growth_exponents(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """Per measure: the slope of log(measure) over log(NICs) (None with fewer than two sizes)."""
    out: dict[str, float | None] = {}
    for key in MEASURES:
        pts = [(r["nics"], r[key]) for r in rows if r.get(key)]
        out[key] = float(np.polyfit(np.log([p[0] for p in pts]), np.log([p[1] for p in pts]), 1)[0]) \
            if len(pts) > 1 else None
    return out


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Wall times and peak RSS over NICs, log-log."""
    from sw.units.plot import plot_figure  # here: main() puts the repo on the path first

    nics = [r["nics"] for r in rows]
    with plot_figure(path, 1, 2, figsize=(10, 4)) as (_, (ax_t, ax_m)):
        for key in ("up_s", "test_s", "down_s"):
            ax_t.plot(nics, [r.get(key, float("nan")) for r in rows], marker="o", label=key[:-2])
        ax_t.set(xscale="log", yscale="log", xlabel="NICs", ylabel="wall s", title="fabric up / test / down")
        ax_t.legend()
        ax_m.plot(nics, [r["peak_rss_bytes"] / 2**20 for r in rows], marker="o")
        ax_m.set(xscale="log", yscale="log", xlabel="NICs", ylabel="MiB", title="peak RSS of the fabric's processes")


def print_table(result: dict[str, Any]) -> None:
    print(f"{'NICs':>5} {'servers':>7} {'spines':>6} {'pods':>4} {'up s':>7} {'test s':>7} {'down s':>7} "
          f"{'RSS MiB':>8}  checks")
    for r in result["rows"]:
        failed = ", ".join(r.get("failed_checks") or {}) or ("all pass" if "test_s" in r else r.get("error", ""))
        print(f"{r['nics']:>5} {r['servers']:>7} {r['spines']:>6} {r['pods']:>4} {r.get('up_s', 0):>7.1f} "
              f"{r.get('test_s', 0):>7.1f} {r.get('down_s', 0):>7.1f} {r['peak_rss_bytes'] / 2**20:>8.0f}  {failed}")
    exps = result["growth_exponents"]
    if any(v is not None for v in exps.values()):
        print("growth exponent in NICs: " + ", ".join(f"{k} {v:.2f}" for k, v in exps.items() if v is not None))
    print(f"load average {result['load_avg'][0]:.2f} on {result['cpus']} CPUs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nics", default="16,64,128,256", help="comma-separated NIC counts (multiples of 4)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    ap.add_argument("--plot", type=Path, help="write a PNG of wall times and memory over NICs")
    args = ap.parse_args()
    try:
        sizes = [int(x) for x in args.nics.split(",")]
    except ValueError:
        ap.exit(2, f"fabric_scale: --nics {args.nics!r}: expected comma-separated integers\n")
    if not sizes or any(n < 8 or n % GPUS_PER_SERVER for n in sizes):
        ap.exit(2, f"fabric_scale: --nics {args.nics!r}: each count a multiple of {GPUS_PER_SERVER}, at least 8\n")
    if os.geteuid() != 0:
        ap.exit(2, "fabric_scale: needs root (network namespaces); run with sudo\n")
    sys.path.insert(0, str(ROOT))
    rows = []
    for nics in sizes:
        print(f"fabric_scale: {nics} NICs {topology(nics)} ...", file=sys.stderr, flush=True)
        try:
            row = measure(nics)
        except Exception as exc:  # one size failing (e.g. out of memory) still reports the others
            row = {"nics": nics, **topology(nics), "error": f"{type(exc).__name__}: {exc}", "peak_rss_bytes": 0}
        rows.append(row)
        print(f"fabric_scale: {nics} NICs: up {row.get('up_s', 0):.1f} s, test {row.get('test_s', 0):.1f} s, "
              f"down {row.get('down_s', 0):.1f} s, peak RSS {row['peak_rss_bytes'] / 2**20:.0f} MiB"
              f"{'; ' + row['error'] if 'error' in row else ''}", file=sys.stderr, flush=True)
    result = {"rows": rows, "growth_exponents": growth_exponents(rows), "load_avg": list(os.getloadavg()),
              "cpus": os.cpu_count()}
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
