"""Test helpers: raw sockets inside a test's own namespaces, and a switch between hosts (``SwitchLab``)."""

from __future__ import annotations

import ctypes
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from emu.netns import Host, NetnsLab
from p4.switch.control import ControlClient

CLONE_NEWNET = 0x40000000
ETH_P_ALL = 0x0003


def open_raw_socket(netns: str | None, ifname: str) -> socket.socket:
    """An AF_PACKET socket bound to ``ifname`` inside namespace ``netns`` (None: this one), non-blocking."""
    opened: list[socket.socket] = []
    failed: list[BaseException] = []

    def opener() -> None:
        try:
            if netns is not None:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns({netns}) failed")
                finally:
                    os.close(fd)
            sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)   # nothing until bound to ifname
            sock.bind((ifname, ETH_P_ALL))
            sock.setblocking(False)
            opened.append(sock)
        except BaseException as exc:    # handed to the caller's thread
            failed.append(exc)

    t = threading.Thread(target=opener)   # setns changes only this short-lived thread's namespace
    t.start()
    t.join()
    if failed:
        raise failed[0]
    return opened[0]


def host_link(lab: NetnsLab) -> tuple[Host, str]:
    """Host h1 (IPv6 off: no stray frames) with eth0 linked to a root-namespace interface, and that one's name."""
    h1 = lab.add_host("h1")
    root_if = f"{lab.prefix}p1"
    lab.add_link(None, h1, ifname_a=root_if, ifname_b="eth0")
    h1.cmd("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
    return h1, root_if


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


PROGRAMS = Path(__file__).with_name("programs")
FEATURES_P4 = PROGRAMS / "switch_features.p4"
PACKET_IGNORE_OUTGOING = 23
SOL_PACKET = 263


def host_mac(i: int) -> str:
    return f"02:00:00:00:00:{i:02x}"


def host_ip(i: int) -> str:
    return f"10.0.{i}.{i}"


class SwitchLab:
    """Namespace ``sw`` running the switch on p1..pN, host ``hI`` (eth0) on port I; raw sockets per host."""

    def __init__(self, lab: NetnsLab, n_hosts: int, tmp: Path, raw_socket) -> None:
        self.lab = lab
        self.tmp = tmp
        self.sw = lab.add_host("sw")
        self.sw.cmd("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        self.sw.cmd("sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        self.hosts = {}
        for i in range(1, n_hosts + 1):
            h = lab.add_host(f"h{i}")
            h.cmd("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
            h.cmd("sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
            lab.add_link(h, self.sw, ifname_a="eth0", ifname_b=f"p{i}", mac_a=host_mac(i))
            h.cmd("ethtool", "-K", "eth0", "tx", "off", "rx", "off", check=False)
            self.hosts[i] = h
        self._raw_socket = raw_socket
        self.socks: dict[int, socket.socket] = {}
        self.ctl = str(tmp / "ctl.sock")
        self.pcap_dir = tmp / "pcap"
        self.log_file = tmp / "switch.log"
        self.proc = None

    def sock(self, i: int) -> socket.socket:
        if i not in self.socks:
            s = self._raw_socket(self.hosts[i].name, "eth0")
            s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            self.socks[i] = s
        return self.socks[i]

    def start(self, program: Path = FEATURES_P4, *extra: str, commands: str | None = None,
              env: dict[str, str] | None = None) -> None:
        cmd_file = None
        if commands is not None:
            cmd_file = self.tmp / "cmds.txt"
            cmd_file.write_text(commands)
        argv = [sys.executable, "-m", "p4.switch", str(program)]
        for i in self.hosts:
            argv += ["-i", f"{i}@p{i}"]
        argv += ["--ctl", self.ctl, "--pcap", str(self.pcap_dir), "--log-file", str(self.log_file), *extra]
        if cmd_file:
            argv += ["--commands", str(cmd_file)]
        for i in self.hosts:
            self.sock(i)     # open host sockets first: they must see everything the switch sends
        self.proc = self.sw.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=None if env is None else {**os.environ, **env})
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline().strip() if ready else ""
        if line != "ready":
            self.proc.kill()
            raise RuntimeError(f"switch did not start: {line!r} {self.proc.stderr.read()}")

    def client(self) -> ControlClient:
        return ControlClient(self.ctl)

    def cli(self, cmd: str) -> str:
        with self.client() as c:
            return c.run(cmd)

    def port_stats(self) -> dict[int, dict[str, int]]:
        text = self.cli("port_stats")
        rows = [line.split() for line in text.splitlines()]
        head = rows[0]
        return {int(r[0]): dict(zip(head[1:], [r[1]] + [int(x) for x in r[2:]], strict=True)) for r in rows[1:]}

    def send(self, i: int, frames: list[bytes]) -> None:
        s = self.sock(i)
        for f in frames:
            while True:
                try:
                    s.send(f)
                    break
                except BlockingIOError:
                    select.select([], [s], [], 1.0)

    def recv(self, i: int, want: int | None = None, quiet_s: float = 0.5, limit_s: float = 15.0) -> list[bytes]:
        """Frames at host i: until ``want`` arrived, or no frame for ``quiet_s`` (bounded by ``limit_s``)."""
        s = self.sock(i)
        got: list[bytes] = []
        deadline = time.monotonic() + limit_s
        last = time.monotonic()
        while time.monotonic() < deadline and (want is None or len(got) < want):
            r, _, _ = select.select([s], [], [], 0.05)
            if r:
                try:
                    while True:
                        got.append(s.recv(65536))
                        last = time.monotonic()
                except BlockingIOError:
                    pass
            elif time.monotonic() - last > quiet_s and (want is None or got):
                break
        return got

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.proc.wait(timeout=10)

    def log_text(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""


def tshark_fields(pcap: Path, *fields: str, display_filter: str = "",
                  options: tuple[str, ...] = ()) -> list[list[str]]:
    """Per packet, the given fields as tshark (an independent decoder) reads them from ``pcap``."""
    argv = ["tshark", "-r", str(pcap), "-T", "fields", "-E", "separator=|", *options]
    if display_filter:
        argv += ["-Y", display_filter]
    for f in fields:
        argv += ["-e", f]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines()]

