"""The Mininet CLI of a running fabric (``starpulse fabric up --cli``): Mininet's commands, made fabric-aware.

A server has one NIC per rail and no single address, so wherever a command names a server it means one NIC:
``s1`` is its rail-0 NIC (or the rail the other end names), ``s1:1`` or ``s1-eth1`` its rail-1 NIC, and a NIC
address names itself.  ``pingall`` pings every NIC pair of two different servers, on their own rail and across
rails; ``iperf``/``iperfudp`` measure between two NICs; ``link A B down|up`` and ``switch S stop|start`` go
through the fault injector (``emu.faults``), so routes and ECMP groups follow.  Fabric commands sit beside them:
``p4``, ``status``, ``fault``, ``int``.  A failing command prints one line and the prompt comes back: only
exit/quit/EOF (or a stop request, e.g. ``starpulse fabric down``) ends the shell, and with it the fabric.
"""

from __future__ import annotations

import os
import re
import select
import shlex
import subprocess
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from mininet.cli import CLI
from mininet.log import error, output
from mininet.util import quietRun

from emu.checks import fabric_pairs
from emu.traffic import ProbeSession
from sw.collectives.fabric_topology import FabricNic, Topology
from sw.units import UnitError, format_rate_bps, parse_number, parse_rate_bps

if TYPE_CHECKING:
    from emu.fabric import Fabric

PING_TIMEOUT_S = 2.0          # wall seconds one ping waits for its reply (ping -W), unless `pingall T` says
PING_PARALLEL = 16            # pings in flight at once
IPERF_PORT = 5001
IPERF_SECONDS = 5             # Mininet's default test length (wall seconds)
IPERF_UDP_BW = "10M"          # Mininet's default UDP rate (network rate here)
IPERF_START_TIMEOUT_S = 10.0  # wall seconds for the iperf server to listen and, after the test, to report
MAX_TEST_S = 3600.0           # longest iperf test / ping timeout the shell accepts
_NIC_NAME = re.compile(r"^(s\d+)(?::(\d+)|-eth(\d+))?$")
_SUBSTITUTED = re.compile(r"^s\d+(?::\d+)?$")   # in node commands s0-eth1 stays an interface name
_PING_RTT = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
_PING_RECEIVED = re.compile(r"(\d+) (?:packets )?received")

NIC_HELP = (
    "Naming NICs: a server has one NIC per rail.  Where a command wants a host, s1 means its rail-0 NIC (or the\n"
    "rail the other end names), s1:1 or s1-eth1 its rail-1 NIC; a NIC address names itself.  Past the first\n"
    "word of a node command, server names become NIC addresses: `s0 ping s1` pings s1's rail-0 NIC,\n"
    "`s0 ping s1:1` its rail-1 NIC (the packet leaves s0 on the rail of its destination).\n"
)


class ShellError(RuntimeError):
    """A shell command used wrongly (bad NIC name, missing argument); the message says what is allowed."""

    is_user_error = True


# --- naming NICs ----------------------------------------------------------------------------------------------
def resolve_nic(topo: Topology, token: str, rail: int | None = None) -> FabricNic:
    """The NIC ``token`` names: ``s3`` (rail ``rail``, default 0), ``s3:1`` / ``s3-eth1`` (rail 1) or an address."""
    for nic in topo.nics:
        if nic.ip == token:
            return nic
    m = _NIC_NAME.match(token)
    if m is None or m.group(1) not in topo.servers:
        raise ShellError(f"{token!r}: not a server NIC (name one as s0, s0:1 or s0-eth1 for rail 1, or its "
                         f"address; servers s0..s{len(topo.servers) - 1})")
    named = m.group(2) or m.group(3)
    want = int(named) if named is not None else (rail or 0)
    for nic in topo.nics_of(m.group(1)):
        if nic.rail == want:
            return nic
    raise ShellError(f"{token!r}: no rail {want} (rails 0..{topo.spec.gpus_per_server - 1})")


def resolve_pair(topo: Topology, a: str, b: str) -> tuple[FabricNic, FabricNic]:
    """Two NICs; a bare server name takes the rail the other end names (rail 0 when neither does)."""
    src, dst = resolve_nic(topo, a), resolve_nic(topo, b)
    if a in topo.servers and b not in topo.servers:
        src = resolve_nic(topo, a, dst.rail)
    elif b in topo.servers and a not in topo.servers:
        dst = resolve_nic(topo, b, src.rail)
    return src, dst


def substitute(topo: Topology, word: str) -> str:
    """A node command's argument with server/NIC names replaced by NIC addresses (other words unchanged)."""
    if not _SUBSTITUTED.match(word):
        return word
    try:
        return resolve_nic(topo, word).ip
    except ShellError:
        return word


# --- ping -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PingResult:
    """One ``ping -c 1`` from one NIC to another: answered or not, and ping's rtt (wall ms)."""

    src: FabricNic
    dst: FabricNic
    received: bool
    rtt_ms: tuple[float, float, float, float] | None   # min, avg, max, mdev


def ping_pairs(fab: Fabric, pairs: list[tuple[FabricNic, FabricNic]],
               timeout_s: float = PING_TIMEOUT_S) -> list[PingResult]:
    """One ping per NIC pair (``ping -I SRC DST`` in the source's namespace), a few in flight at once."""
    done: dict[int, PingResult] = {}
    running: dict[int, subprocess.Popen] = {}
    todo = list(range(len(pairs) - 1, -1, -1))
    try:
        while todo or running:
            while todo and len(running) < PING_PARALLEL:
                i = todo.pop()
                src, dst = pairs[i]
                running[i] = fab.net.hosts[src.server].popen(
                    ["ping", "-n", "-q", "-c", "1", "-W", f"{timeout_s:g}", "-I", src.ip, dst.ip],
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            i = min(running)
            out, _ = running.pop(i).communicate()
            text = out.decode(errors="replace")
            got = _PING_RECEIVED.search(text)
            rtt = _PING_RTT.search(text)
            done[i] = PingResult(*pairs[i], bool(got and int(got.group(1)) > 0),
                                 tuple(float(x) for x in rtt.groups()) if rtt else None)
    finally:
        for proc in running.values():
            proc.kill()
            proc.wait()
    return [done[i] for i in range(len(pairs))]


def _number(text: str, what: str, hi: float) -> float:
    """A number of seconds in (0, hi]; anything else is a ``ShellError`` naming it and the range."""
    try:
        return float(parse_number(text, what=what, lo=0, hi=hi, lo_exclusive=True, unit="s"))
    except UnitError as exc:
        raise ShellError(str(exc)) from None


def _pct(lost: int, total: int) -> str:
    return f"{100.0 * lost / total:.3g}" if total else "0"


# --- iperf ----------------------------------------------------------------------------------------------------
def run_iperf(fab: Fabric, src: FabricNic, dst: FabricNic, seconds: float,
              udp_bps: int | None = None) -> dict[str, Any]:
    """iperf (v2) from ``src`` to ``dst`` for ``seconds`` of wall time, TCP or UDP at ``udp_bps`` (network rate).
    Returns the server's and the client's rate in network time (bit/s), and for UDP the server's loss %."""
    clock = fab.clock
    proto = ["-u"] if udp_bps else []
    server = fab.net.hosts[dst.server].popen(
        ["iperf", "-s", *proto, "-B", dst.ip, "-p", str(IPERF_PORT), "-y", "C"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    client: subprocess.Popen | None = None
    try:
        _wait_listening(fab, dst, bool(udp_bps))
        rate = ["-b", str(max(1, int(clock.wall_rate_bps(udp_bps))))] if udp_bps else []
        client = fab.net.hosts[src.server].popen(
            ["iperf", "-c", dst.ip, "-B", src.ip, "-p", str(IPERF_PORT), "-t", f"{seconds:g}", "-y", "C",
             *proto, *rate], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = client.communicate(timeout=seconds + IPERF_START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise ShellError(f"iperf client on {src.server}: no result within "
                             f"{seconds + IPERF_START_TIMEOUT_S:g} s") from None
        rows = [ln.split(",") for ln in out.decode(errors="replace").splitlines() if ln.count(",") >= 8]
        if not rows:
            raise ShellError(f"iperf {src.ip} -> {dst.ip}: {err.decode(errors='replace').strip() or 'no result'}")
        ready, _, _ = select.select([server.stdout], [], [], IPERF_START_TIMEOUT_S)
        server_row = server.stdout.readline().decode(errors="replace").split(",") if ready else []
    finally:   # also on Ctrl-C: neither end outlives the command
        if client is not None and client.poll() is None:
            client.kill()
            client.wait()
        server.terminate()
        try:
            server.wait(timeout=3)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    result: dict[str, Any] = {"client_bps": clock.net_rate_bps(float(rows[0][8])),
                              "server_bps": clock.net_rate_bps(float(server_row[8])) if len(server_row) > 8 else None}
    if udp_bps and len(server_row) > 12:
        result["loss_pct"] = float(server_row[12])
    return result


def _wait_listening(fab: Fabric, nic: FabricNic, udp: bool) -> None:
    """Until the iperf server in ``nic``'s namespace listens (bounded by ``IPERF_START_TIMEOUT_S`` of wall time)."""
    clock = fab.clock
    host = fab.net.hosts[nic.server]
    deadline_ns = clock.now_ns() + clock.net_duration_ns(IPERF_START_TIMEOUT_S * 1e9)
    while clock.now_ns() < deadline_ns:
        if host.cmd(f"ss -Hln{'u' if udp else 't'} 'sport = :{IPERF_PORT}'").strip():
            return
        clock.sleep_ns(clock.net_duration_ns(50e6))
    raise ShellError(f"iperf server on {nic.server} ({nic.ip}:{IPERF_PORT}) did not start listening")


# --- the shell ------------------------------------------------------------------------------------------------
class FabricShell(CLI):
    """Mininet's CLI on a ``Fabric``: fabric-aware built-ins, fabric commands, and errors that never end it."""

    prompt = "mininet> "

    helpStr = (
        "You may also send a command to a node using:\n"
        "  <node> command {args}\n"
        "For example:\n"
        "  mininet> s0 ip -br addr\n"
        "  mininet> s0 ping -c 2 s1:1\n"
        "\n" + NIC_HELP + "\n"
        "Fabric commands: p4 SWITCH CMD, status, fault ACTION TARGET [VALUE], int SRC DST;\n"
        "`py fab` is the Fabric object, `py net` Mininet's.  Ctrl-C gives a new prompt; exit, quit or\n"
        "Ctrl-D leaves the shell and tears the fabric down.\n\n"
    )

    def __init__(self, fab: Fabric, *, name: str = "default", stop_requested: Callable[[], bool] | None = None,
                 on_fault: Callable[[], None] | None = None, lock: Any = None, **kwargs: Any) -> None:
        """Runs the shell until exit; ``stop_requested`` ends it early, ``on_fault`` runs after a fault applied;
        every command holds ``lock`` (shared with whoever else drives the fabric's nodes, e.g. its socket)."""
        self.fab = fab
        self.lock = lock or threading.RLock()
        self.fabric_name = name
        self.stop_requested = stop_requested or (lambda: False)
        self.on_fault = on_fault or (lambda: None)
        super().__init__(fab.net.net, **kwargs)

    def getLocals(self) -> dict[str, Any]:  # Mininet's name
        """``py``/``px`` see the nodes, ``net`` (Mininet) and ``fab`` (the Fabric)."""
        return {**super().getLocals(), "fab": self.fab}

    # --- the loop: Ctrl-C gives a new prompt, errors give one line ----------------------------------------------
    def run(self) -> None:
        """Mininet's loop (Ctrl-C: 'Interrupt' and a new prompt) that also ends when a stop is requested."""
        while not self.stop_requested():
            try:
                for node in self.mn.values():
                    while node.waiting:
                        node.sendInt()
                        node.waitOutput()
                if self.isatty():
                    quietRun("stty echo sane intr ^C")
                self.cmdloop()
                break
            except KeyboardInterrupt:
                output("\n*** Stop requested: leaving the CLI\n" if self.stop_requested() else "\nInterrupt\n")

    def onecmd(self, line: str) -> Any:
        """One command; whatever it raises (but Ctrl-C) becomes a one-line error and the prompt comes back."""
        try:
            with self.lock:
                return super().onecmd(line)
        except KeyboardInterrupt:
            raise
        except (Exception, SystemExit) as exc:  # a CLI command must never end the fabric
            what = (line.split() or ["?"])[0]
            text = " ".join(str(exc).split()) or type(exc).__name__
            if not getattr(exc, "is_user_error", False):
                text = f"{type(exc).__name__}: {text}"
            error(f"*** Error: {what}: {text}\n")
            return None

    def postcmd(self, stop: Any, line: str) -> Any:
        return stop or self.stop_requested()

    def default(self, line: str) -> None:
        """``NODE CMD ARGS`` runs CMD in NODE's namespace; server/NIC names in ARGS become NIC addresses."""
        first, args, line = self.parseline(line)
        if first not in self.mn:
            error(f"*** Unknown command: {line} (help lists the commands)\n")
            return
        if not args:
            error(f"*** Please enter a command for node: {first} <cmd>\n")
            return
        node = self.mn[first]
        node.sendCmd(" ".join(substitute(self.fab.topo, w) for w in args.split(" ")))
        self.waitForNode(node)

    # --- reachability ------------------------------------------------------------------------------------------
    def _ping(self, pairs: list[tuple[FabricNic, FabricNic]], timeout_arg: str, full: bool) -> None:
        timeout_s = _number(timeout_arg, "TIMEOUT_S", MAX_TEST_S) if timeout_arg.strip() else PING_TIMEOUT_S
        if not pairs:
            raise ShellError("no NIC pairs of two different servers to ping (one server only?)")
        rails = self.fab.spec.gpus_per_server
        own = sum(1 for a, b in pairs if a.rail == b.rail)
        across = (f"{len(pairs) - own} across rails" if self.fab.spec.spines
                  else "none across rails (rail-only fabric: rails meet only inside a server)")
        output(f"*** Ping: testing ping reachability between NICs ({rails} per server; {own} pairs on their own "
               f"rail, {across}; same-server pairs not pinged)\n")
        results = ping_pairs(self.fab, pairs, timeout_s)
        if full:
            dil = self.fab.clock.dilation
            output("*** Results:" + (f" (rtt in network time, dilation {dil:g})" if dil != 1 else "") + "\n")
            for r in results:
                rtt = ("rtt min/avg/max/mdev " + "/".join(f"{x / dil:.3f}" for x in r.rtt_ms) + " ms"
                       if r.rtt_ms else "no reply")
                output(f" {r.src.ifname}->{r.dst.ifname} ({r.dst.ip}): {int(r.received)}/1, {rtt}\n")
        else:
            by_src: dict[str, list[str]] = {}
            for r in results:
                by_src.setdefault(r.src.ifname, []).append(r.dst.ifname if r.received else "X")
            for src, dsts in by_src.items():
                output(f"{src} -> {' '.join(dsts)}\n")
        got = sum(r.received for r in results)
        output(f"*** Results: {_pct(len(results) - got, len(results))}% dropped ({got}/{len(results)} received; "
               f"{own} NIC pairs on their own rail, {len(results) - own} across rails)\n")

    def do_pingall(self, line: str) -> None:
        """Ping every NIC pair of two different servers, on its own rail and across rails (one ping each).
        Usage: pingall [TIMEOUT_S]"""
        self._ping(fabric_pairs(self.fab), line, full=False)

    def do_pingallfull(self, line: str) -> None:
        """pingall, with every pair's rtt.  Usage: pingallfull [TIMEOUT_S]"""
        self._ping(fabric_pairs(self.fab), line, full=True)

    def _first_two(self) -> list[tuple[FabricNic, FabricNic]]:
        servers = self.fab.topo.servers[:2]
        return [(a, b) for a, b in fabric_pairs(self.fab) if {a.server, b.server} == set(servers)]

    def do_pingpair(self, line: str) -> None:
        """Ping every NIC pair of the first two servers (s0, s1), both ways, own rail and across rails."""
        self._ping(self._first_two(), line, full=False)

    def do_pingpairfull(self, line: str) -> None:
        """pingpair, with every pair's rtt."""
        self._ping(self._first_two(), line, full=True)

    # --- bandwidth ---------------------------------------------------------------------------------------------
    def _iperf_args(self, line: str, with_bw: bool) -> tuple[float, str | None, FabricNic, FabricNic]:
        words = shlex.split(line)
        seconds: float = IPERF_SECONDS
        if "-t" in words:
            i = words.index("-t")
            if i + 1 == len(words):
                raise ShellError("-t: give the test length in seconds, e.g. -t 3")
            seconds = _number(words[i + 1], "-t", MAX_TEST_S)
            del words[i:i + 2]
        bw = None
        if with_bw:
            bw = words.pop(0) if len(words) in (1, 3) else IPERF_UDP_BW
        servers = self.fab.topo.servers
        if not words:
            if len(servers) < 2:
                raise ShellError("iperf needs two servers")
            words = [servers[0], servers[-1]]
        if len(words) != 2:
            raise ShellError("usage: iperf [-t SECONDS] [A B]; iperfudp [-t SECONDS] [BW [A B]] "
                             "(A, B: s0 = rail 0, s0:1 = rail 1, or a NIC address)")
        src, dst = resolve_pair(self.fab.topo, *words)
        if src.server == dst.server:
            raise ShellError(f"{src.ifname} -> {dst.ifname}: same server (the kernel delivers it locally)")
        return seconds, bw, src, dst

    def _iperf_header(self, kind: str, src: FabricNic, dst: FabricNic, seconds: float) -> None:
        rails = f"rail {src.rail}" if src.rail == dst.rail else f"rails {src.rail} -> {dst.rail}"
        output(f"*** Iperf: testing {kind} bandwidth between {src.ifname} ({src.ip}) and {dst.ifname} ({dst.ip}), "
               f"{rails}, {seconds:g} s\n")

    def _rates_note(self) -> str:
        dil = self.fab.clock.dilation
        return (f"line rate {format_rate_bps(self.fab.spec.link_rate_bps)}"
                + (f"; network time, dilation {dil:g}" if dil != 1 else ""))

    def do_iperf(self, line: str) -> None:
        """TCP bandwidth between two NICs (rail 0 unless named).
        Usage: iperf [-t SECONDS] [A B]   e.g. iperf s0 s1, iperf s0:1 s1 (both on rail 1), iperf s0 s1:1"""
        seconds, _, src, dst = self._iperf_args(line, with_bw=False)
        self._iperf_header("TCP", src, dst, seconds)
        r = run_iperf(self.fab, src, dst, seconds)
        server = format_rate_bps(r["server_bps"]) if r["server_bps"] is not None else "?"
        output(f"*** Results: ['{server}', '{format_rate_bps(r['client_bps'])}'] (server, client; "
               f"{self._rates_note()})\n")

    def do_iperfudp(self, line: str) -> None:
        """UDP bandwidth at a given rate between two NICs (rail 0 unless named).
        Usage: iperfudp [-t SECONDS] [BW [A B]]   e.g. iperfudp 5M s0 s1:1 (default BW 10M)"""
        seconds, bw, src, dst = self._iperf_args(line, with_bw=True)
        try:
            bw_bps = parse_rate_bps(bw or IPERF_UDP_BW, what="iperfudp BW")
        except UnitError as exc:
            raise ShellError(str(exc)) from None
        self._iperf_header("UDP", src, dst, seconds)
        r = run_iperf(self.fab, src, dst, seconds, udp_bps=bw_bps)
        server = format_rate_bps(r["server_bps"]) if r["server_bps"] is not None else "?"
        loss = f"; server saw {r['loss_pct']:g}% lost" if "loss_pct" in r else ""
        output(f"*** Results: ['{format_rate_bps(bw_bps)}', '{server}', '{format_rate_bps(r['client_bps'])}'] "
               f"(asked, server, client{loss}; {self._rates_note()})\n")

    # --- links and switches through the fault injector ---------------------------------------------------------
    def _apply_fault(self, action: str, target: str, value: str | None = None) -> None:
        from emu.cli import print_fault_events

        assert self.fab.faults is not None
        try:
            print_fault_events([asdict(self.fab.faults.apply(action, target, value))])
        finally:
            self.on_fault()

    def do_link(self, line: str) -> None:
        """Bring a link down or up through the fault injector (routes and ECMP groups follow).
        Usage: link NODE1 NODE2 up|down   e.g. link s0 p0l0 down, link p0l0 sp1 up"""
        words = line.split()
        if len(words) != 3 or words[2] not in ("up", "down"):
            raise ShellError("usage: link NODE1 NODE2 up|down (e.g. link s0 p0l0 down, link p0l0 sp0 up)")
        self._apply_fault(f"link_{words[2]}", f"{words[0]}:{words[1]}")

    def do_switch(self, line: str) -> None:
        """Stop or start a P4 switch through the fault injector (restarted switches are reprogrammed).
        Usage: switch SWITCH stop|start"""
        words = line.split()
        if len(words) != 2 or words[1] not in ("stop", "start"):
            raise ShellError("usage: switch SWITCH stop|start")
        self._apply_fault(f"switch_{words[1]}", words[0])

    def do_fault(self, line: str) -> None:
        """Inject a fault, as `starpulse fabric fault` does.
        Usage: fault ACTION TARGET [VALUE] | fault --script FILE
        ACTION: link_down|link_up|slow_link|restore_link|loss|delay|switch_stop|switch_start|slow_gpu|restore_gpu;
        TARGET: a link A:B (s0:p0l0, p0l0:sp0), a switch or a rank; VALUE: slow_link rate, loss %, delay (5ms),
        slow_gpu compute factor"""
        from emu.cli import print_fault_events

        words = shlex.split(line)
        if words[:1] == ["--script"]:
            if len(words) != 2:
                raise ShellError("usage: fault --script FILE")
            try:
                with open(words[1]) as f:
                    text = f.read()
            except OSError as exc:
                raise ShellError(f"--script {words[1]}: {exc.strerror}") from None
            assert self.fab.faults is not None
            try:
                print_fault_events([asdict(e) for e in self.fab.faults.run_script(text)])
            finally:
                self.on_fault()
            return
        if len(words) not in (2, 3):
            raise ShellError("usage: fault ACTION TARGET [VALUE] (e.g. fault link_down p0l0:sp0) or "
                             "fault --script FILE")
        self._apply_fault(*words)

    # --- fabric commands ---------------------------------------------------------------------------------------
    def do_p4(self, line: str) -> None:
        """Run a switch command on one P4 switch (its control socket).
        Usage: p4 SWITCH CMD [ARGS]   e.g. p4 p0l0 port_stats, p4 sp0 table_dump FabricIngress.ipv4_lpm"""
        words = line.split(None, 1)
        if len(words) != 2:
            raise ShellError(f"usage: p4 SWITCH CMD [ARGS] (switches: {', '.join(self.fab.net.switches)})")
        out = self.fab.switch_cli(words[0], words[1])
        if out.strip():
            output(out.rstrip("\n") + "\n")

    def complete_p4(self, text: str, line: str, _begidx: int, _endidx: int) -> list[str]:
        words = line.split()
        if len(words) == 1 or (len(words) == 2 and not line.endswith(" ")):
            return [s for s in self.fab.net.switches if s.startswith(text)]
        return []

    def do_status(self, line: str) -> None:
        """Per-port counters, queue high-water marks, ECN marks and drops (what `starpulse fabric status` prints).
        Usage: status [--json]"""
        import json

        from emu.cli import print_status

        status = self.fab.status()
        if line.split() == ["--json"]:
            output(json.dumps(status, indent=2) + "\n")
        elif line.strip():
            raise ShellError("usage: status [--json]")
        else:
            print_status(self.fabric_name, status)

    def do_int(self, line: str) -> None:
        """Send a probe SRC -> DST and back (UDP 4791, INT on) and print the INT hops of both directions.
        Usage: int SRC DST   e.g. int s0 s1:1 (SRC, DST: s0 = rail 0, s0:1 = rail 1, or a NIC address)"""
        words = line.split()
        if len(words) != 2:
            raise ShellError("usage: int SRC DST (e.g. int s0 s1, int s0:1 s1:0)")
        src, dst = resolve_pair(self.fab.topo, *words)
        if src.server == dst.server:
            raise ShellError(f"{src.ifname} -> {dst.ifname}: same server (no switch on the way, no INT)")
        pairs = [(src.ip, dst.ip), (dst.ip, src.ip)]
        with ProbeSession(self.fab, pairs) as session:
            there, back = session.run(pairs)
        names = {sw.device_id: sw.name for sw in self.fab.topo.switches}
        # a probe's reply carries the INT stack of the way back: the probe dst -> src carries the path src -> dst
        for a, b, r in ((src, dst, back), (dst, src, there)):
            if not r["ok"]:
                output(f"{a.ifname} {a.ip} -> {b.ifname} {b.ip}: no answer\n")
                continue
            hops = list(reversed(r["rev_int"]))
            output(f"{a.ifname} {a.ip} -> {b.ifname} {b.ip}: {len(hops)} INT hop(s), probe rtt "
                   f"{r['rtt_ns'] / 1e3:.0f} us\n")
            for n, h in enumerate(hops, 1):
                output(f"  {n} {names.get(h['node_id'], h['node_id'])!s:<6} port {h['ingress_port']} -> "
                       f"{h['egress_port']}  hop latency {h['hop_latency_us']} us  queue {h['queue_occupancy_pkts']} "
                       f"pkts  egress ts {h['egress_ts_us']} us  tx {h['tx_bytes']} B\n")

    # --- what a fabric has no use for ----------------------------------------------------------------------------
    def do_xterm(self, line: str, term: str = "xterm") -> None:
        """Spawn xterm(s) for the given node(s) (needs an X display).  Usage: xterm node1 node2 ..."""
        if not os.environ.get("DISPLAY"):
            error(f"*** {term}: no X display (DISPLAY is not set); run commands as `NODE CMD` here, "
                  "e.g. s0 ip -br addr\n")
            return
        super().do_xterm(line, term)

    def do_x(self, line: str) -> None:
        """Create an X11 tunnel to a node (needs an X display).  Usage: x node [cmd args]"""
        if not os.environ.get("DISPLAY"):
            error("*** x: no X display (DISPLAY is not set); run commands as `NODE CMD` here\n")
            return
        super().do_x(line)

    def do_dpctl(self, _line: str) -> None:
        """OpenFlow dpctl: not for P4 switches; use `p4 SWITCH CMD` (e.g. p4 p0l0 table_dump ...)."""
        error("*** dpctl: the fabric's switches are P4 switches, not OpenFlow; use p4 SWITCH CMD\n")

    # --- views with fabric detail ------------------------------------------------------------------------------
    def do_links(self, _line: str) -> None:
        """Report on links: Mininet's view, the fabric link each half belongs to, its rate and fault state."""
        faults = self.fab.faults.active() if self.fab.faults else {}
        by_ifname = {}
        for lk in self.fab.topo.links:
            by_ifname[lk.a_ifname] = by_ifname[lk.b_ifname] = lk
        for link in self.mn.links:
            lk = by_ifname.get(link.intf1.name) or by_ifname.get(link.intf2.name)
            extra = ""
            if lk is not None:
                name = ":".join(sorted((lk.a, lk.b)))
                state = ("DOWN (fault)" if name in faults.get("down_links", []) else
                         f"slow {format_rate_bps(faults['slow_links'][name])}"
                         if name in faults.get("slow_links", {}) else "up")
                extra = f" {lk.a}:{lk.b} {format_rate_bps(lk.rate_bps)} {state}"
            output(f"{link} {link.status()}{extra}\n")
