"""Where the CPU goes under ``fabric bench`` (issue 23, item 2): py-spy samples every switch and NIC generator.

    sudo .venv/bin/python scripts/fabric_profile.py [--servers 4 --gpus-per-server 2] [--time-dilation 5]
                                                    [--datapath python|native] [--seconds 10] [--top 12]

Brings up the fabric, runs one ``fabric bench`` all-to-all run at line rate, and meanwhile records every switch
and generator process with ``py-spy record --format raw`` for the middle of the run.  Prints, per component class,
the functions with the most samples of their own (a C call is counted on its Python caller's line, so the
syscalls are in the caller's share) as a share of that class's busy samples: samples waiting for input
(``select`` in the switch's loop, ``idle_wait``/``wait_stdin`` and below in the generator) and threads without
Python frames (the numerical libraries' pools) are left out.  And the run's CPU-seconds per million packet-hops
per class (user and system time: the kernel's share of forwarding shows there, not in py-spy's samples) and the
load average.  py-spy comes with the dev dependencies.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from emu.fabric import Fabric  # noqa: E402
from emu.fabric_bench import run_once  # noqa: E402
from sw.clock import get_clock  # noqa: E402

IDLE = ("EpollSelector.select", "_PollLikeSelector.select", "idle_wait", "wait_stdin")
START_DELAY_S = 1.0     # after traffic starts: sample the steady state


def _frame(text: str) -> str:
    """``func (path:line)`` as ``func (short/path)``."""
    text = re.sub(r":\d+\)$", ")", text)
    return re.sub(r"\(.*?/(sw|p4|emu|lib/python3\.\d+|site-packages)/", "(", text)


def top_self(paths: list[Path], top: int) -> tuple[int, int, list[tuple[str, float]]]:
    """(all samples, busy samples, [(function, share of busy)]) over collapsed-stack files."""
    own: collections.Counter[str] = collections.Counter()
    total = busy = 0
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            n = int(count)
            total += n
            frames = [_frame(f) for f in stack.split(";")]
            leaf = frames[-1]
            if not leaf or any(f.split(" ")[0] in IDLE for f in frames):   # "": a thread without Python frames
                continue
            busy += n
            own[leaf] += n
    return total, busy, [(f, n / busy) for f, n in own.most_common(top)] if busy else []


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--servers", type=int, default=4)
    p.add_argument("--gpus-per-server", type=int, default=2)
    p.add_argument("--time-dilation", type=float, default=5.0)
    p.add_argument("--link-rate", default="100M")
    p.add_argument("--datapath", default="python", choices=("python", "native"))
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if os.geteuid() != 0 or not Path(spy).exists():
        print("fabric_profile: needs root and py-spy (pip install -e '.[dev]')", file=sys.stderr)
        return 2
    out = Path(tempfile.mkdtemp(prefix="starpulse-profile-"))
    spies: list[subprocess.Popen] = []
    record_s = max(1, int(args.seconds - START_DELAY_S - 1))   # py-spy's -d takes whole seconds
    with Fabric(servers=args.servers, gpus_per_server=args.gpus_per_server, link_rate=args.link_rate,
                time_dilation=args.time_dilation) as fab:
        clock = get_clock()

        def attach(pids: dict[str, list[int]]) -> None:
            def later() -> None:
                clock.sleep_ns(clock.net_duration_ns(START_DELAY_S * 1e9))
                for comp in ("switches", "nics"):
                    for pid in pids[comp]:
                        spies.append(subprocess.Popen(
                            [spy, "record", "-p", str(pid), "-d", str(record_s), "-r", "200", "-f", "raw",
                             "-o", str(out / f"{comp}-{pid}.txt"), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            threading.Thread(target=later, daemon=True).start()

        row = run_once(fab, pattern="all-to-all", fraction=1.0, wall_s=args.seconds, datapath=args.datapath,
                       on_start=attach)
        for s in spies:
            s.wait(timeout=60)
    report = {"load_avg_1m": os.getloadavg()[0], "datapath": row["datapath"], "time_dilation": args.time_dilation,
              "forwarded_pkts_per_wall_s": row["forwarded_pkts_per_wall_s"], "cpu": row["cpu"],
              "fidelity_ok": row["fidelity"]["ok"], "profiles": {}}
    for comp in ("switches", "nics"):
        total, busy, rows = top_self(sorted(out.glob(f"{comp}-*.txt")), args.top)
        report["profiles"][comp] = {"samples": total, "busy_samples": busy, "top_self": rows}
    shutil.rmtree(out, ignore_errors=True)
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"{args.servers}x{args.gpus_per_server} fabric, dilation {args.time_dilation:g}, {row['datapath']} NIC "
          f"data path, load {report['load_avg_1m']:.1f}: {row['forwarded_pkts_per_wall_s']:.0f} packet-hops/s")
    for comp, prof in report["profiles"].items():
        cpu = row["cpu"][comp]
        print(f"\n{comp}: {cpu['cpu_s']} CPU-s ({cpu['system_s']} in the kernel), {cpu['cpu_s_per_m_packet_hops']} "
              "CPU-s per M packet-hops; "
              f"{prof['busy_samples']} busy of {prof['samples']} samples")
        print("| share | function |\n|---:|---|")
        for fn, share in prof["top_self"]:
            print(f"| {100 * share:.1f} % | `{fn}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
