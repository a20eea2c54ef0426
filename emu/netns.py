"""Network namespaces, veth links and processes that a test or tool creates itself and always removes.

A small, dependency-free alternative to a full Mininet net for two- or three-host experiments: every name
carries a unique prefix, everything created is tracked, and ``destroy()`` removes exactly that, also after
failures.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field

from emu.reap import owned_tempdir, record
from emu.wire import WireProfile
from sw.clock import Clock, get_clock

IFNAME_MAX = 15  # Linux IFNAMSIZ - 1


class NetnsError(RuntimeError):
    """A namespace/link operation failed; the message carries the command and what the kernel said."""

    is_user_error = True


def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise NetnsError(f"`{' '.join(argv)}` failed (exit {out.returncode}): {out.stderr.strip()}")
    return out


def unique_prefix(tag: str = "sp") -> str:
    """A short prefix unique to this process, so parallel runs never collide (fits interface names)."""
    return f"{tag}{os.getpid() % 100000}"


@dataclass
class Host:
    """One network namespace standing for a server; commands run inside it with ``ip netns exec``."""

    name: str
    lab: NetnsLab = field(repr=False)

    def cmd(self, *argv: str, check: bool = True) -> str:
        return _run(["ip", "netns", "exec", self.name, *argv], check=check).stdout

    def popen(self, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start a process in this namespace; the lab kills it on destroy."""
        proc = subprocess.Popen(["ip", "netns", "exec", self.name, *argv], start_new_session=True, **kwargs)
        self.lab.processes.append(proc)
        return proc


@dataclass
class Link:
    """A veth pair between two hosts (or a host and the root namespace when ``host`` is None)."""

    a: Host | None
    ifname_a: str
    b: Host | None
    ifname_b: str


class NetnsLab:
    """Creates hosts and links under one prefix; a context manager that always tears down what it made."""

    def __init__(self, prefix: str | None = None, clock: Clock | None = None) -> None:
        self.prefix = prefix or unique_prefix()
        self.clock = clock or get_clock()
        self.hosts: list[Host] = []
        self.links: list[Link] = []
        self.processes: list[subprocess.Popen] = []
        self.owned = owned_tempdir("starpulse-netns-")   # names what we create before we create it (emu.reap)

    def __enter__(self) -> NetnsLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # --- building -----------------------------------------------------------------------------------------
    def add_host(self, short_name: str) -> Host:
        name = f"{self.prefix}-{short_name}"
        record(self.owned, netns=[name])
        _run(["ip", "netns", "add", name])
        host = Host(name, self)
        self.hosts.append(host)
        host.cmd("ip", "link", "set", "lo", "up")
        return host

    def add_link(self, a: Host | None, b: Host | None, *, ifname_a: str, ifname_b: str,
                 addr_a: str | None = None, addr_b: str | None = None, mtu: int = 1500,
                 mac_a: str | None = None, mac_b: str | None = None) -> Link:
        """Join two hosts with a veth pair; names are used inside the namespaces, temporary names outside."""
        for ifname in (ifname_a, ifname_b):
            if len(ifname) > IFNAME_MAX:
                raise NetnsError(f"interface name {ifname!r} is longer than {IFNAME_MAX} characters")
        n = len(self.links)
        tmp_a, tmp_b = f"{self.prefix}a{n}"[:IFNAME_MAX], f"{self.prefix}b{n}"[:IFNAME_MAX]
        root_names = [tmp_a] + [ifname for host, ifname in ((a, ifname_a), (b, ifname_b)) if host is None]
        record(self.owned, links=[n for n in root_names if n.startswith(self.prefix)])   # never another's name
        _run(["ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b])
        link = Link(a, ifname_a, b, ifname_b)
        self.links.append(link)
        for host, tmp, ifname, addr, mac in ((a, tmp_a, ifname_a, addr_a, mac_a),
                                             (b, tmp_b, ifname_b, addr_b, mac_b)):
            if host is not None:
                _run(["ip", "link", "set", tmp, "netns", host.name])
                run_in = host.cmd
            else:
                def run_in(*argv: str, check: bool = True) -> str:
                    return _run(list(argv), check=check).stdout
            run_in("ip", "link", "set", tmp, "name", ifname)
            run_in("ip", "link", "set", ifname, "mtu", str(mtu))
            if mac:
                run_in("ip", "link", "set", ifname, "address", mac)
            if addr:
                run_in("ip", "addr", "add", addr, "dev", ifname)
            run_in("ip", "link", "set", ifname, "up")
        return link

    def shape_rate(self, host: Host, ifname: str, rate_bps: int, *, burst_bytes: int = 16384,
                   latency_ns: int = 10_000_000) -> None:
        """Kernel rate limit (tbf) on egress of ``ifname``; the rate is in network time (divided by dilation).

        This kernel has no netem: delay, loss, duplication and reordering come from ``add_wired_link``.
        """
        rate = int(self.clock.wall_rate_bps(rate_bps))
        latency_us = int(self.clock.wall_duration_ns(latency_ns) // 1000)
        host.cmd("tc", "qdisc", "replace", "dev", ifname, "root", "tbf", "rate", f"{rate}bit",
                 "burst", str(burst_bytes), "latency", f"{latency_us}us")

    def add_wired_link(self, a: Host, b: Host, profile: WireProfile, *, ifname_a: str, ifname_b: str,
                       addr_a: str | None = None, addr_b: str | None = None, mtu: int = 1500,
                       mac_a: str | None = None, mac_b: str | None = None, seed: int = 1,
                       stats_path: str | None = None) -> Host:
        """Join ``a`` and ``b`` through a wire namespace running ``emu.wire`` with ``profile`` both ways."""
        wire = self.add_host(f"w{len(self.links)}")
        self.add_link(a, wire, ifname_a=ifname_a, ifname_b="wa", addr_a=addr_a, mtu=mtu, mac_a=mac_a)
        self.add_link(wire, b, ifname_a="wb", ifname_b=ifname_b, addr_b=addr_b, mtu=mtu, mac_b=mac_b)
        for host, ifname in ((a, ifname_a), (wire, "wa"), (wire, "wb"), (b, ifname_b)):
            host.cmd("ethtool", "-K", ifname, "tso", "off", "gso", "off", "gro", "off", check=False)
        argv = [sys.executable, "-m", "emu.wire", "--a", "wa", "--b", "wb", "--seed", str(seed),
                "--loss", str(profile.loss_pct), "--dup", str(profile.dup_pct),
                "--reorder", str(profile.reorder_pct), "--queue-pkts", str(profile.queue_pkts)]
        if profile.rate_bps:
            argv += ["--rate", str(profile.rate_bps)]
        if profile.delay_ns:
            argv += ["--delay", f"{profile.delay_ns}ns"]
        if profile.jitter_ns:
            argv += ["--jitter", f"{profile.jitter_ns}ns"]
        if stats_path:
            argv += ["--stats", stats_path]
        env = dict(os.environ, STARPULSE_TIME_DILATION=str(self.clock.dilation))
        proc = wire.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = proc.stdout.readline() if proc.stdout else ""
        if line.strip() != "ready":
            err = proc.stderr.read() if proc.stderr and proc.poll() is not None else ""
            raise NetnsError(f"link emulator in {wire.name} did not start: {err.strip() or line.strip()}")
        return wire

    # --- teardown -----------------------------------------------------------------------------------------
    def destroy(self) -> None:
        """Kill our processes and delete our namespaces (their veths go with them); nothing else."""
        for proc in self.processes:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in self.processes:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=5)
        self.processes.clear()
        for link in self.links:
            if link.a is None or link.b is None:   # an end in the root namespace (both: deleting one deletes the pair)
                root_if = link.ifname_a if link.a is None else link.ifname_b
                _run(["ip", "link", "delete", root_if], check=False)
        self.links.clear()
        for host in reversed(self.hosts):
            _run(["ip", "netns", "delete", host.name], check=False)
        self.hosts.clear()
        shutil.rmtree(self.owned, ignore_errors=True)
