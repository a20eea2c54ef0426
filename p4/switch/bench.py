"""Forwarding benchmark of the switch process through veths: ``python -m p4.switch.bench``.

Builds three namespaces of its own (generator, switch, sink) joined by veths, runs the switch with basic IPv4
forwarding, offers UDP load from a fast generator (flat out: ``trafgen`` from netsniff-ng when installed, else a
tight Python AF_PACKET sender; ``--rate PPS``: a paced Python sender, since trafgen's rate mode is bursty), and
counts forwarded packets with the sink interface's kernel counters.  It also reports the switch's CPU time per
packet (so a figure taken on a busy machine still tells what one free core would do) and how many frames the
kernel dropped at the switch's receive buffer.  Everything it creates is removed on exit, also on errors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from p4.errors import P4Error
from p4.switch.control import ControlClient

BASIC_P4 = Path(__file__).resolve().parents[1] / "programs" / "basic.p4"
SWITCH_MAC = "02:00:00:00:00:fe"
SINK_MAC = "02:00:00:00:00:02"
GEN_MAC = "02:00:00:00:00:01"
REFERENCE_PPS = {"bmv2_default_64": 17_000, "bmv2_perf_64": 74_000, "bmv2_perf_1500": 53_000}

_PY_SENDER = r"""
import socket, sys, time
frame = bytes.fromhex(sys.argv[2]); stop = time.monotonic() + float(sys.argv[3]); rate = float(sys.argv[4])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW); s.bind((sys.argv[1], 0))
send, now, sleep = s.send, time.monotonic, time.sleep
start, n = now(), 0
while now() < stop:
    for _ in range(16):
        try: send(frame)
        except OSError: pass
    n += 16
    if rate:                                  # paced: bursts of 16 on a smooth schedule
        ahead = start + n / rate - now()
        if ahead > 0: sleep(ahead)
"""


class SwitchBenchError(P4Error):
    """The benchmark could not build its namespaces or start a process."""


def _run(*argv: str, check: bool = True) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True)
    if check and out.returncode != 0:
        raise SwitchBenchError(f"`{' '.join(argv)}` failed: {out.stderr.strip()}")
    return out.stdout


def udp_frame(size: int) -> bytes:
    """An IPv4/UDP frame of ``size`` bytes (without FCS) from 10.0.1.1 to 10.0.2.2 with a valid checksum."""
    ip_len = size - 14
    ip = bytearray([0x45, 0, ip_len >> 8, ip_len & 0xFF, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 1, 1, 10, 0, 2, 2])
    s = sum((ip[i] << 8) | ip[i + 1] for i in range(0, 20, 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    ip[10], ip[11] = (~s >> 8) & 0xFF, ~s & 0xFF
    udp_len = ip_len - 20
    udp = bytes([0x9C, 0x40, 0x13, 0x88, udp_len >> 8, udp_len & 0xFF, 0, 0])
    eth = bytes.fromhex(SWITCH_MAC.replace(":", "") + GEN_MAC.replace(":", "")) + b"\x08\x00"
    return eth + bytes(ip) + udp + bytes(udp_len - 8)


class BenchLab:
    """Namespaces ``<p>-gen``, ``<p>-sw``, ``<p>-sink``; ``close()`` kills our processes and deletes them."""

    def __init__(self) -> None:
        self.prefix = f"spb{os.getpid() % 100000}"
        self.ns = {k: f"{self.prefix}-{k}" for k in ("gen", "sw", "sink")}
        self.procs: list[subprocess.Popen] = []
        self.created: list[str] = []

    def build(self) -> None:
        for name in self.ns.values():
            _run("ip", "netns", "add", name)
            self.created.append(name)
            self.exec(name, "ip", "link", "set", "lo", "up")
            self.exec(name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            self.exec(name, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        for n, (a, a_if, b, b_if, mac) in enumerate((("gen", "eth0", "sw", "p1", GEN_MAC),
                                                      ("sw", "p2", "sink", "eth0", SINK_MAC))):
            ta, tb = f"{self.prefix}a{n}", f"{self.prefix}b{n}"
            _run("ip", "link", "add", ta, "type", "veth", "peer", "name", tb)
            for tmp, host, ifname in ((ta, a, a_if), (tb, b, b_if)):
                _run("ip", "link", "set", tmp, "netns", self.ns[host])
                self.exec(self.ns[host], "ip", "link", "set", tmp, "name", ifname)
                if ifname == "eth0":
                    self.exec(self.ns[host], "ip", "link", "set", ifname, "address", mac)
                self.exec(self.ns[host], "ip", "link", "set", ifname, "up")
                self.exec(self.ns[host], "ethtool", "-K", ifname, "tx", "off", "gro", "off", "gso", "off",
                          "tso", "off", check=False)

    def exec(self, ns: str, *argv: str, check: bool = True) -> str:
        return _run("ip", "netns", "exec", ns, *argv, check=check)

    def popen(self, ns: str, argv: list[str], **kwargs) -> subprocess.Popen:
        p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], start_new_session=True, **kwargs)
        self.procs.append(p)
        return p

    def counter(self, ns_key: str, ifname: str, name: str) -> int:
        return int(self.exec(self.ns[ns_key], "cat", f"/sys/class/net/{ifname}/statistics/{name}").strip())

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)

    def close(self) -> None:
        for p in self.procs:
            self.stop(p)
        for name in reversed(self.created):
            _run("ip", "netns", "delete", name, check=False)
        self.created.clear()


def _start_generator(lab: BenchLab, frame: bytes, seconds: float, tool: str, workdir: Path,
                     rate_pps: int | None) -> subprocess.Popen:
    if tool == "trafgen":
        if rate_pps:
            raise SwitchBenchError("--rate uses the paced Python sender (trafgen's rate mode sends in bursts that "
                             "overflow any receive buffer); use --generator python or auto")
        cfg = workdir / "frame.cfg"
        cfg.write_text("{ " + ", ".join(f"0x{b:02x}" for b in frame) + " }\n")
        return lab.popen(lab.ns["gen"], ["timeout", "-s", "INT", str(seconds), "trafgen", "--dev", "eth0",
                                         "--conf", str(cfg), "--cpus", "1", "--no-sock-mem", "--notouch-irq",
                                         "--no-cpu-stats"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return lab.popen(lab.ns["gen"], [sys.executable, "-c", _PY_SENDER, "eth0", frame.hex(), str(seconds),
                                     str(rate_pps or 0)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (from /proc, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(lab: BenchLab, size: int, seconds: float, warmup_s: float, tool: str, workdir: Path,
            switch_pid: int, rate_pps: int | None = None) -> dict:
    """Offer load for warmup + seconds; forwarded pps from the sink's rx counter over the measured window,
    and the switch's CPU time per forwarded packet (what it would reach with a core to itself)."""
    frame = udp_frame(size)
    gen = _start_generator(lab, frame, warmup_s + seconds + 0.5, tool, workdir, rate_pps)
    try:
        time.sleep(warmup_s)
        t0 = time.monotonic()
        cpu0 = _cpu_s(switch_pid)
        rx0 = lab.counter("sink", "eth0", "rx_packets")
        off0 = lab.counter("sw", "p1", "rx_packets")
        time.sleep(seconds)
        rx1 = lab.counter("sink", "eth0", "rx_packets")
        off1 = lab.counter("sw", "p1", "rx_packets")
        cpu1 = _cpu_s(switch_pid)
        dt = time.monotonic() - t0
    finally:
        lab.stop(gen)
    fwd = rx1 - rx0
    us_per_pkt = (cpu1 - cpu0) * 1e6 / fwd if fwd else None
    return {"frame_bytes": size, "generator": tool, "seconds": round(dt, 3),
            "offered_pps": round((off1 - off0) / dt), "forwarded_pps": round(fwd / dt),
            "switch_cpu_share": round((cpu1 - cpu0) / dt, 2),
            "switch_cpu_us_per_pkt": round(us_per_pkt, 2) if us_per_pkt else None,
            "one_core_pps": round(1e6 / us_per_pkt) if us_per_pkt else None}


def run(program: Path, sizes: list[int], seconds: float, warmup_s: float, tool: str,
        rate_pps: int | None = None, port_rate: str | None = None, priority_queues: int = 1,
        lag_accounting: bool = True) -> dict:
    if os.geteuid() != 0:
        raise SwitchBenchError("the benchmark needs root (network namespaces, raw sockets)")
    if tool == "auto":
        tool = "trafgen" if shutil.which("trafgen") and not rate_pps else "python"
    elif tool == "trafgen" and not shutil.which("trafgen"):
        raise SwitchBenchError("--generator trafgen: trafgen not found (Debian package netsniff-ng)")
    lab = BenchLab()
    workdir = Path(tempfile.mkdtemp(prefix="starpulse-bench-"))
    try:
        lab.build()
        cmds = workdir / "cmds.txt"
        cmds.write_text(f"table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.2.2/32 => {SINK_MAC} 2\n"
                        + (f"set_port_rate 2 {port_rate}\n" if port_rate else ""))
        ctl = str(workdir / "ctl.sock")
        sw = lab.popen(lab.ns["sw"], [sys.executable, "-m", "p4.switch", str(program), "-i", "1@p1", "-i", "2@p2",
                                      "--commands", str(cmds), "--log-level", "warn", "--ctl", ctl,
                                      "--priority-queues", str(priority_queues),
                                      *([] if lag_accounting else ["--no-lag-accounting"])],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = sw.stdout.readline().strip() if sw.stdout else ""
        if line != "ready":
            raise SwitchBenchError(f"switch did not start: {sw.stderr.read() if sw.stderr else ''}")
        results = []
        for size in sizes:
            r = measure(lab, size, seconds, warmup_s, tool, workdir, sw.pid, rate_pps)
            with ControlClient(ctl) as client:          # where the rest went: the switch's own counters
                stats = client.port_stats()
                client.run("port_stats_reset")
            r["switch_rx_kernel_drops"] = stats[1]["rx_kernel_drops"]
            r["switch_tx_ring"] = stats[2]["tx_ring"]          # the egress port sent through its transmit ring
            r["switch_tx_errors"] = stats[2]["tx_errors"]
            results.append(r)
        alive = sw.poll() is None
    finally:
        lab.close()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"program": str(program), "port_rate": port_rate, "priority_queues": priority_queues,
            "lag_accounting": lag_accounting,
            "switch_alive_after": alive, "results": results,
            "reference_pps": REFERENCE_PPS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m p4.switch.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--program", type=Path, default=BASIC_P4, help="P4 program (default: basic.p4)")
    parser.add_argument("--sizes", default="64,1500", help="frame sizes in bytes, comma separated")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per size (default 5)")
    parser.add_argument("--warmup", type=float, default=1.0, help="load before measuring (default 1 s)")
    parser.add_argument("--generator", choices=("auto", "trafgen", "python"), default="auto")
    parser.add_argument("--rate", type=int, metavar="PPS",
                        help="offered load in packets/s from a paced sender (default: flat out)")
    parser.add_argument("--port-rate", metavar="RATE",
                        help="shape the egress port (e.g. 100G): every packet then takes the queued path")
    parser.add_argument("--priority-queues", type=int, default=1, metavar="N",
                        help="TM queues per port (1..8; the fabric runs 8): priority-0 traffic uses one of them")
    parser.add_argument("--no-lag-accounting", dest="lag_accounting", action="store_false",
                        help="run the switch with --no-lag-accounting (what the accounting costs: "
                             "scripts/lag_cost_bench.py compares both)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        print(f"--sizes {args.sizes!r}: expected sizes in bytes like 64,1500", file=sys.stderr)
        return 2
    if any(not 60 <= s <= 1514 for s in sizes) or not 0 < args.seconds <= 120 or not 1 <= args.priority_queues <= 8:
        print("--sizes: each 60..1514; --seconds: 0..120; --priority-queues: 1..8", file=sys.stderr)
        return 2
    try:
        out = run(args.program, sizes, args.seconds, args.warmup, args.generator, args.rate, args.port_rate,
                  args.priority_queues, args.lag_accounting)
    except SwitchBenchError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    ref = REFERENCE_PPS
    for r in out["results"]:
        key = "bmv2_perf_64" if r["frame_bytes"] <= 64 else "bmv2_perf_1500"
        print(f"{r['frame_bytes']:>5} B: forwarded {r['forwarded_pps']:>8,} pps (offered {r['offered_pps']:,} pps,"
              f" {r['generator']}); vs BMv2 perf build {ref[key]:,}: {r['forwarded_pps'] / ref[key]:.2f}x,"
              f" vs default build {ref['bmv2_default_64']:,}: {r['forwarded_pps'] / ref['bmv2_default_64']:.2f}x;"
              f" switch CPU {r['switch_cpu_share']:.0%}, {r['switch_cpu_us_per_pkt']} us/pkt"
              f" (one core: {r['one_core_pps'] or 0:,} pps), switch rx-buffer drops"
              f" {r['switch_rx_kernel_drops']:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
