"""``starpulse fabric bench``: how much traffic the emulated fabric forwards per wall second, and where the CPU goes.

On a running ``Fabric`` every server runs one ``sw.roce.tools.blast`` process (all its NICs), which offers
line-rate RoCEv2 (RDMA WRITE frames, paced per NIC in network time) in an ``all-to-all`` pattern (every NIC to
every NIC of the other servers) or ``incast`` (every other NIC to the first), for a bounded wall time.  Reported:
packet-hops (frames the switches transmitted, from their port counters) and their bytes per wall second,
CPU-seconds per million packet-hops per component class (utime + stime from ``/proc/PID/stat`` of the processes
the fabric knows: switches, link emulators, NIC generators; collectives when any run), the ``fidelity`` verdict,
and with ``find_max_rate`` the highest offered fraction of line rate that stayed ``fidelity.ok``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu.status import parse_port_stats, spec_dict
from emu.traffic import PROBE_READY_TIMEOUT_NS, TrafficError, read_line, stop_proc
from p4.switch.tm import DEFAULT_QUEUE_DEPTH_PKTS
from sw.units.plot import plot_figure

if TYPE_CHECKING:
    from emu.fabric import Fabric

PATTERNS = ("all-to-all", "incast")
COMPONENTS = ("switches", "nics", "link_emulators", "collectives")
RESULT_GRACE_NS = 30_000_000_000     # wall ns beyond the run (and its drain) for every generator's result line
SEARCH_MIN_FRACTION = 1 / 64
DRAIN_QUEUES = 3     # queues in a row a frame may wait in (leaf, spine, leaf)
SEARCH_BISECT_STEPS = 3
_CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    """Bad bench options or a run that could not finish; one line."""

    is_user_error = True


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process so far in seconds (``/proc/PID/stat``), zeros when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    return int(fields[11]) / _CLK_TCK, int(fields[12]) / _CLK_TCK      # fields 14, 15 of proc(5)


def _class_cpu(pids: dict[str, list[int]]) -> dict[str, tuple[float, float]]:
    """(user, system) seconds summed per component class."""
    out = {}
    for comp in COMPONENTS:
        times = [cpu_seconds(p) for p in pids[comp]]
        out[comp] = (sum(t[0] for t in times), sum(t[1] for t in times))
    return out


def pattern_pairs(fab: Fabric, pattern: str) -> dict[str, list[str]]:
    """Destination addresses of every NIC (by interface) for ``pattern``; receive-only NICs get none."""
    nics = fab.topo.nics
    if pattern == "all-to-all":
        return {n.ifname: [m.ip for m in nics if m.server != n.server] for n in nics}
    if pattern == "incast":
        sink = nics[0]
        return {n.ifname: ([] if n.server == sink.server else [sink.ip]) for n in nics}
    raise BenchError(f"--pattern {pattern!r}: expected one of {', '.join(PATTERNS)}")


def _switch_totals(fab: Fabric) -> dict[str, int]:
    """Frames and bytes every switch transmitted and dropped since its last ``port_stats_reset``."""
    tot = {"packet_hops": 0, "hop_bytes": 0, "switch_rx_pkts": 0, "queue_drop_pkts": 0, "pipeline_drop_pkts": 0,
           "rx_kernel_drops": 0}
    for name in fab.net.switches:
        for row in parse_port_stats(fab.switch_cli(name, "port_stats")).values():
            tot["packet_hops"] += row.get("tx_pkts", 0)
            tot["hop_bytes"] += row.get("tx_bytes", 0)
            tot["switch_rx_pkts"] += row.get("rx_pkts", 0)
            for key in ("queue_drop_pkts", "pipeline_drop_pkts", "rx_kernel_drops"):
                tot[key] += row.get(key, 0)
    return tot


def _component_pids(fab: Fabric) -> dict[str, list[int]]:
    """The fabric's own processes by component class (the NIC generators are added per run)."""
    net = fab.net
    return {"switches": [s.proc.pid for s in net.switches.values() if s.proc is not None],
            "link_emulators": [w.proc.pid for w in net.wires.values() if w.proc is not None],
            "collectives": []}


def run_once(fab: Fabric, *, pattern: str, fraction: float, wall_s: float, datapath: str,
             on_start: Callable[[dict[str, list[int]]], None] | None = None) -> dict[str, Any]:
    """One bounded run at ``fraction`` of line rate per NIC; the figures of one row of the bench.  ``on_start``
    gets the pids by component class once traffic starts (``scripts/fabric_profile.py`` attaches py-spy there)."""
    spec = fab.spec
    rate_bps = max(1, int(spec.link_rate_bps * fraction))
    # the receivers keep receiving until full queues on a path could have drained (wall time)
    drain_net_ns = DRAIN_QUEUES * DEFAULT_QUEUE_DEPTH_PKTS * (spec.mtu + 100) * 8 * 1e9 / spec.link_rate_bps
    drain_s = max(0.5, fab.clock.wall_duration_ns(drain_net_ns) / 1e9)
    dsts = pattern_pairs(fab, pattern)
    for name in fab.net.switches:
        fab.switch_cli(name, "port_stats_reset")          # also restarts the switch's lag accounting
    if fab.lag_dir is not None:
        for old in fab.lag_dir.glob("*.json"):
            if old.stem in fab.owned.get("bench_pids", ()):
                old.unlink()                              # a previous run's generators: not this run's lag
    procs: dict[str, subprocess.Popen] = {}
    try:
        for server in sorted({n.server for n in fab.topo.nics}, key=lambda s: int(s[1:])):
            argv = [sys.executable, "-m", "sw.roce.tools.blast", "--rate-bps", str(rate_bps), "--wall-s", str(wall_s),
                    "--drain-s", f"{drain_s:.3f}",
                    "--datapath", datapath]
            for nic in fab.topo.nics_of(server):
                argv += ["--nic", f"{nic.ifname}={','.join(dsts[nic.ifname])}"]
            procs[server] = fab.net.hosts[server].popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                        stderr=subprocess.PIPE)
            fab.helper_procs.append(procs[server])
        fab.owned.setdefault("bench_pids", []).extend(str(p.pid) for p in procs.values())
        for server, proc in procs.items():
            read_line(fab.clock, proc, server, "ready", PROBE_READY_TIMEOUT_NS)
        pids = _component_pids(fab)
        pids["nics"] = [p.pid for p in procs.values()]
        cpu0 = _class_cpu(pids)
        t0 = fab.clock.now_ns()
        for proc in procs.values():
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        if on_start is not None:
            on_start(pids)
        budget = fab.clock.net_duration_ns(wall_s * 1e9 + RESULT_GRACE_NS)
        results = {s: json.loads(read_line(fab.clock, p, s, None, int(budget))) for s, p in procs.items()}
        wall = fab.clock.wall_duration_ns(fab.clock.now_ns() - t0) / 1e9
        cpu1 = _class_cpu(pids)
        cpu = {c: (cpu1[c][0] - cpu0[c][0], cpu1[c][1] - cpu0[c][1]) for c in COMPONENTS}
        nprocs = {c: len(pids[c]) for c in COMPONENTS}
    except TrafficError as exc:
        raise BenchError(f"fabric bench: {exc}") from None
    finally:
        for proc in procs.values():
            stop_proc(proc)
            fab.helper_procs.remove(proc)
    sw = _switch_totals(fab)
    nic_rows = [row for r in results.values() for row in r["nics"].values()]
    hops_m = sw["packet_hops"] / 1e6
    return {
        "pattern": pattern, "datapath": results[next(iter(results))]["datapath"],
        "offered_fraction": fraction, "offered_rate_bps": rate_bps, "traffic_wall_s": wall_s, "wall_s": round(wall, 3),
        "sent_pkts": sum(r["tx_frames"] for r in nic_rows), "sent_bytes": sum(r["tx_bytes"] for r in nic_rows),
        "delivered_pkts": sum(r["rx"]["good"] for r in nic_rows),
        "delivered_bad_icrc": sum(r["rx"]["bad_icrc"] for r in nic_rows),
        **sw,
        "forwarded_pkts_per_wall_s": round(sw["packet_hops"] / wall_s, 1),    # per second of offered traffic
        "forwarded_bytes_per_wall_s": round(sw["hop_bytes"] / wall_s, 1),
        "cpu": {c: {"processes": nprocs[c], "cpu_s": round(sum(cpu[c]), 3), "user_s": round(cpu[c][0], 3),
                    "system_s": round(cpu[c][1], 3),
                    "cpu_s_per_m_packet_hops": round(sum(cpu[c]) / hops_m, 3) if hops_m and nprocs[c] else None}
                for c in COMPONENTS},
        "fidelity": fab.fidelity(),
    }


def run_bench(fab: Fabric, *, pattern: str, fraction: float, wall_s: float, datapath: str,
              find_max_rate: bool = False, echo: Any = None) -> dict[str, Any]:
    """The bench's JSON: one run at ``fraction``, and with ``find_max_rate`` a search (halving from there, then
    bisecting) for the highest fraction of line rate whose run stays ``fidelity.ok``."""
    say = echo or (lambda line: None)
    if datapath == "native":
        from sw.roce.native.build import load

        load()           # built (and cached) once here, not by every generator at once; warns if it cannot be
    first = run_once(fab, pattern=pattern, fraction=fraction, wall_s=wall_s, datapath=datapath)
    say(summary(first))
    out: dict[str, Any] = {"topology": spec_dict(fab.spec), "time_dilation": fab.clock.dilation,
                           "nics": len(fab.topo.nics), **first}
    if not find_max_rate:
        return out
    steps = [first]
    ok_f, bad_f = (fraction, None) if first["fidelity"]["ok"] else (None, fraction)
    f = fraction
    while ok_f is None and f / 2 >= SEARCH_MIN_FRACTION:
        f /= 2
        steps.append(run_once(fab, pattern=pattern, fraction=f, wall_s=wall_s, datapath=datapath))
        say(summary(steps[-1]))
        ok_f, bad_f = (f, bad_f) if steps[-1]["fidelity"]["ok"] else (None, f)
    for _ in range(SEARCH_BISECT_STEPS if ok_f is not None and bad_f is not None else 0):
        f = (ok_f + bad_f) / 2
        steps.append(run_once(fab, pattern=pattern, fraction=f, wall_s=wall_s, datapath=datapath))
        say(summary(steps[-1]))
        ok_f, bad_f = (f, bad_f) if steps[-1]["fidelity"]["ok"] else (ok_f, f)
    out["max_ok_fraction"] = ok_f
    out["max_ok_rate_bps"] = int(fab.spec.link_rate_bps * ok_f) if ok_f is not None else None
    out["rate_search"] = [{k: s[k] for k in ("offered_fraction", "offered_rate_bps", "forwarded_pkts_per_wall_s",
                                              "delivered_pkts", "sent_pkts")}
                          | {"fidelity_ok": s["fidelity"]["ok"], "late_share": s["fidelity"]["late_share"],
                             "worst_component": s["fidelity"]["worst_component"]}
                          for s in steps]
    return out


def summary(row: dict[str, Any]) -> str:
    """One text line of a run."""
    cpu = ", ".join(f"{c} {v['cpu_s_per_m_packet_hops']}" for c, v in row["cpu"].items()
                    if v["cpu_s_per_m_packet_hops"] is not None)
    fid = row["fidelity"]
    return (f"{row['pattern']} at {row['offered_fraction']:.3g} x line ({row['datapath']}): "
            f"{row['forwarded_pkts_per_wall_s']:.0f} packet-hops/s, {row['forwarded_bytes_per_wall_s'] / 1e6:.2f} MB/s;"
            f" CPU-s per M packet-hops: {cpu}; fidelity {'ok' if fid['ok'] else 'NOT ok'}"
            f" (worst {fid.get('worst_component')})")


def plot(result: dict[str, Any], path: str) -> None:
    """CPU-seconds per million packet-hops per component, and (after a rate search) forwarded vs offered."""
    search = result.get("rate_search")
    with plot_figure(path, 1, 2 if search else 1, figsize=(11 if search else 6, 4), squeeze=False) as (_, axes):
        comps = [c for c in COMPONENTS if result["cpu"][c]["cpu_s_per_m_packet_hops"] is not None]
        ax = axes[0][0]
        ax.bar(comps, [result["cpu"][c]["cpu_s_per_m_packet_hops"] for c in comps], color="tab:blue")
        ax.set_ylabel("CPU-seconds per million packet-hops")
        ax.set_title(f"{result['pattern']}, {result['nics']} NICs, dilation {result['time_dilation']:g}, "
                     f"{result['datapath']}")
        if search:
            ax2 = axes[0][1]
            pts = sorted(search, key=lambda s: s["offered_fraction"])
            ax2.plot([s["offered_fraction"] for s in pts], [s["forwarded_pkts_per_wall_s"] for s in pts], "-k")
            for s in pts:
                ax2.plot(s["offered_fraction"], s["forwarded_pkts_per_wall_s"], "o",
                         color="tab:green" if s["fidelity_ok"] else "tab:red")
            ax2.set_xlabel("offered load (fraction of line rate per NIC)")
            ax2.set_ylabel("packet-hops per wall second")
            ax2.set_title("green: fidelity ok, red: not ok")
