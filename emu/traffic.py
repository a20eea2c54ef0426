"""Traffic helpers of a running fabric: reachability probes, ECMP flows, paced congestion, the INT collector.

Each runs ``emu.probe`` inside the fabric's hosts (never anywhere else), waits for it with bounded timeouts
in network time (``sw.clock``), and always stops what it started.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from emu.probe import MAX_RTO_NS
from sw.clock import Clock

if TYPE_CHECKING:
    from emu.fabric import Fabric

PROBE_PORT = 4791
PROBE_READY_TIMEOUT_NS = 20_000_000_000
# A probe pair's CPU cost end to end (prober, host stack, up to 5 Python switch hops each way) is estimated well
# below a millisecond (not measured per pair); 2 ms per pair per CPU leaves room for a loaded machine without
# waiting forever on a lost prober (the 256-NIC test's 64,512 pairs pass in ~110 s with this bound).
PROBE_PAIR_CPU_NS = 2_000_000
SINK_IDLE_MS = 1500


class TrafficError(RuntimeError):
    """A traffic helper failed: bad addresses, or a helper process that did not answer in time."""

    is_user_error = True


def probe(fab: Fabric, pairs: list[tuple[str, str]], *, timeout_ms: int = 400, retries: int = 4,
          port: int = PROBE_PORT) -> list[dict[str, Any]]:
    """UDP probes between NIC addresses (``emu.probe`` in every involved host); one result per pair."""
    with ProbeSession(fab, pairs, port=port) as session:
        return session.run(pairs, timeout_ms=timeout_ms, retries=retries)


def send_flows(fab: Fabric, src_ip: str, dst_ip: str, count: int, *, port: int = PROBE_PORT,
               seed: int | None = None) -> int:
    """``count`` one-packet UDP flows src -> dst from distinct random source ports (the ECMP entropy)."""
    nic = next((n for n in fab.topo.nics if n.ip == src_ip), None)
    if nic is None:
        raise TrafficError(f"{src_ip} is not a NIC address of this fabric")
    out = fab.net.hosts[nic.server].cmd(
        f"{sys.executable} -m emu.probe --flows {count} --src {src_ip} --dst {dst_ip} --port {port}"
        f" --seed {fab.spec.seed if seed is None else seed} 2>&1")
    try:
        return int(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TrafficError(f"sending flows from {nic.server}: {out.strip()[-500:]}") from None


def send_through(fab: Fabric, src_ip: str, dst_ip: str, *, packets: int, pps: float, payload_bytes: int,
                 idle_pairs: list[tuple[str, str]] | None = None, port: int = PROBE_PORT
                 ) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """Paced ECN-capable UDP src -> dst, received by a sink that records ECN and the last hop's INT per
    packet; ``idle_pairs`` are probed meanwhile.  Returns (sink rows, idle probe results)."""
    nics = {n.ip: n for n in fab.topo.nics}
    if src_ip not in nics or dst_ip not in nics:
        raise TrafficError(f"{src_ip} -> {dst_ip}: not NIC addresses of this fabric")
    py = [sys.executable, "-m", "emu.probe", "--port", str(port)]
    sink = fab.net.hosts[nics[dst_ip].server].popen(
        [*py, "--sink", dst_ip, "--idle-ms", str(SINK_IDLE_MS), "--start-ms", str(PROBE_READY_TIMEOUT_NS // 10**6 * 2)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)   # the idle probers start before the blast: seconds at scale
    started = [sink]
    fab.helper_procs.append(sink)   # down() stops them too, should this be interrupted
    idle: list[dict[str, Any]] = []
    session = ProbeSession(fab, idle_pairs, port=port) if idle_pairs else None
    try:
        read_line(fab.clock, sink, nics[dst_ip].server, "ready", PROBE_READY_TIMEOUT_NS)
        blast = fab.net.hosts[nics[src_ip].server].popen(
            [*py, "--blast", str(packets), "--pps", f"{pps:.3f}", "--size", str(payload_bytes), "--ecn",
             "--src", src_ip, "--dst", dst_ip], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        started.append(blast)
        fab.helper_procs.append(blast)
        while session is not None and blast.poll() is None:   # idle paths, while the port is congested
            idle += session.run(idle_pairs, retries=1)
        budget_ns = int(packets / pps * 1e9) * 4 + PROBE_READY_TIMEOUT_NS
        read_line(fab.clock, blast, nics[src_ip].server, None, budget_ns)
        rows = json.loads(read_line(fab.clock, sink, nics[dst_ip].server, None, budget_ns))
    finally:
        if session is not None:
            session.close()
        for proc in started:
            stop_proc(proc)
            fab.helper_procs.remove(proc)
    return rows, idle


def int_collector(fab: Fabric) -> ReportCollector:
    """Capture INT reports at the collector (report mode): ``with fab.int_collector() as c: ...; c.reports``."""
    if fab.net.collector is None:
        raise TrafficError("no INT collector: bring the fabric up with int_sink='report' (--int-sink report)")
    return ReportCollector(fab)


def read_line(clock: Clock, proc: subprocess.Popen, who: str, expect: str | None, timeout_ns: int) -> str:
    """The next line (or the next equal to ``expect``) a helper process prints, within ``timeout_ns``."""
    assert proc.stdout is not None
    deadline = clock.now_ns() + timeout_ns
    while True:
        remaining = deadline - clock.now_ns()
        if remaining <= 0:
            raise TrafficError(f"emu.probe on {who}: no answer within {timeout_ns / 1e9:.1f} s")
        ready, _, _ = select.select([proc.stdout], [], [], clock.wall_duration_ns(remaining) / 1e9)
        if not ready:
            continue
        line = proc.stdout.readline().decode(errors="replace").strip()
        if not line:
            err = proc.stderr.read().decode(errors="replace")[-1000:] if proc.stderr else ""
            raise TrafficError(f"emu.probe on {who} exited: {err.strip() or 'no output'}")
        if expect is None or line == expect:
            return line


def read_lines(clock: Clock, procs: dict[str, subprocess.Popen], timeout_ns: int, *,
               partial: bool = False) -> dict[str, str]:
    """The next line of every helper process, read from all of them at once within ``timeout_ns`` (``partial``:
    return the lines that came by then instead of failing).

    Read concurrently, not one process after the other: a prober that has finished its own pairs still echoes
    the others' probes, and it cannot while it is blocked writing a result line larger than the pipe buffer
    that nobody reads yet (its peers' probes to it were then lost: the 64-NIC reachability check failed)."""
    deadline = clock.now_ns() + timeout_ns
    bufs = {who: bytearray() for who in procs}
    lines: dict[str, str] = {}
    fds = {proc.stdout.fileno(): who for who, proc in procs.items() if proc.stdout is not None}
    while len(lines) < len(procs):
        remaining = deadline - clock.now_ns()
        if remaining <= 0:
            if partial:
                return lines
            late = sorted(set(procs) - set(lines))
            raise TrafficError(f"emu.probe on {', '.join(late)}: no answer within {timeout_ns / 1e9:.1f} s")
        waiting = [fd for fd, who in fds.items() if who not in lines]
        ready, _, _ = select.select(waiting, [], [], clock.wall_duration_ns(remaining) / 1e9)
        for fd in ready:
            who = fds[fd]
            chunk = procs[who].stdout.read1(1 << 16)   # what the pipe holds now: never blocks after select
            if not chunk:
                proc = procs[who]
                err = proc.stderr.read().decode(errors="replace")[-1000:] if proc.stderr else ""
                raise TrafficError(f"emu.probe on {who} exited: {err.strip() or 'no output'}")
            bufs[who] += chunk
            if b"\n" in bufs[who]:
                line, _, rest = bytes(bufs[who]).partition(b"\n")
                if rest.strip():
                    raise TrafficError(f"emu.probe on {who}: unexpected output after its result line")
                lines[who] = line.decode(errors="replace").strip()
    return lines


class ReportCollector:
    """``emu.probe --collect`` on the collector host while the ``with`` block runs; ``reports`` afterwards."""

    def __init__(self, fab: Fabric) -> None:
        self.fab = fab
        self.reports: list[dict[str, Any]] = []
        self.drops: dict[str, int] = {}     # frames the collector could not parse as INT reports, by reason
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> ReportCollector:
        col = self.fab.net.collector
        assert col is not None
        ifnames = ",".join(self.fab.net.collector_ifnames.values())
        self.proc = col.popen([sys.executable, "-m", "emu.probe", "--collect", ifnames],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.fab.helper_procs.append(self.proc)
        read_line(self.fab.clock, self.proc, "collector", "ready", PROBE_READY_TIMEOUT_NS)
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self.proc
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.write(b"quit\n")
            proc.stdin.flush()
            out = json.loads(read_line(self.fab.clock, proc, "collector", None, PROBE_READY_TIMEOUT_NS))
            self.reports, self.drops = out["reports"], out["drops"]
        finally:
            stop_proc(proc)
            self.fab.helper_procs.remove(proc)
            self.proc = None


def probe_budget_ns(pairs: int, servers: int, timeout_ms: int, retries: int) -> int:
    """How long (network time) a round of ``pairs`` probes may take before its late probers' pairs count as
    unanswered: ``PROBE_PAIR_CPU_NS`` per pair over the CPUs the probers and switches share (the work grows with
    the pairs, n^2 in the NICs, while the probers only run side by side up to the CPU count), plus every
    attempt's timeout backed off to its cap (``emu.probe.RetransmitTimer``) and a start-up margin."""
    parallel = max(1, min(servers, os.cpu_count() or 1))
    timeouts_ns = sum(min(MAX_RTO_NS, timeout_ms * 1_000_000 << k) for k in range(retries + 2))
    return -(-pairs // parallel) * PROBE_PAIR_CPU_NS + timeouts_ns + PROBE_READY_TIMEOUT_NS


class ProbeSession:
    """``emu.probe`` processes in the hosts of some NIC pairs, started once and reused for several rounds."""

    def __init__(self, fab: Fabric, pairs: list[tuple[str, str]], *, port: int = PROBE_PORT) -> None:
        self.fab = fab
        self.by_ip = {n.ip: n for n in fab.topo.nics}
        for src, dst in pairs:
            for ip in (src, dst):
                if ip not in self.by_ip:
                    raise TrafficError(f"{ip} is not a NIC address of this fabric")
        involved = {ip for pair in pairs for ip in pair}
        self.servers = sorted({self.by_ip[ip].server for ip in involved}, key=lambda s: int(s[1:]))
        self.procs: dict[str, subprocess.Popen] = {}
        try:
            for server in self.servers:
                addrs = ",".join(n.ip for n in fab.topo.nics_of(server) if n.ip in involved)
                self.procs[server] = fab.net.hosts[server].popen(
                    [sys.executable, "-m", "emu.probe", "--addrs", addrs, "--port", str(port)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for server, proc in self.procs.items():
                read_line(fab.clock, proc, server, "ready", PROBE_READY_TIMEOUT_NS)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ProbeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, pairs: list[tuple[str, str]], *, timeout_ms: int = 400, retries: int = 4) -> list[dict[str, Any]]:
        """One round: every pair probed by its source's host, all hosts at once; one result per pair."""
        work: dict[str, list[tuple[str, str]]] = {s: [] for s in self.servers}
        for src, dst in pairs:
            work[self.by_ip[src].server].append((src, dst))
        for server, proc in self.procs.items():
            assert proc.stdin is not None
            req = {"pairs": work[server], "timeout_ms": timeout_ms, "retries": retries}
            proc.stdin.write((json.dumps(req) + "\n").encode())
            proc.stdin.flush()
        budget_ns = probe_budget_ns(len(pairs), len(self.servers), timeout_ms, retries)
        results: dict[tuple[str, str], dict[str, Any]] = {}
        lines = read_lines(self.fab.clock, self.procs, budget_ns, partial=True)
        for line in lines.values():
            for r in json.loads(line)["results"]:
                results[(r["src"], r["dst"])] = r
        late = {s for s in self.servers if s not in lines}     # its pairs are unanswered, and say why
        for src, dst in pairs:
            if self.by_ip[src].server in late:
                results[(src, dst)] = {"src": src, "dst": dst, "ok": False, "late_prober": self.by_ip[src].server,
                                       "budget_s": round(budget_ns / 1e9, 1)}
        return [results[p] for p in pairs]

    def close(self) -> None:
        for proc in self.procs.values():
            stop_proc(proc)
        self.procs.clear()


def stop_proc(proc: subprocess.Popen) -> None:
    """Ask a helper to quit (``quit`` on stdin), then terminate/kill it; close its pipes."""
    if proc.poll() is None:
        try:
            if proc.stdin:
                proc.stdin.write(b"quit\n")
                proc.stdin.flush()
        except OSError:
            pass
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=3)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
