"""Links with loss and delay: a namespace running the user-space link emulator (``emu.wire``) spliced into a link.

This kernel has no tc netem and the P4 switch's traffic manager has no loss or delay knob, so a link that must
lose or delay frames is built as ``A <-veth-> W <-veth-> B``, where ``W`` runs ``emu.wire`` (delay line and
seeded loss, both directions, in network time through ``sw.clock``).  The endpoints keep their interface names,
MACs and addresses, so the switch and the host see an ordinary link.  Changing a wired link's loss or delay
restarts its emulator with the new profile (frames in its delay line at that moment are lost).  Each wired link
costs one Python process, so links are wired only on request (``wired=...``) or when ``--delay`` is set.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

from emu.wire import WireProfile
from sw.clock import Clock

WIRE_READY_TIMEOUT_S = 20.0


class LinkEmulatorError(RuntimeError):
    """A link emulator would not start; the message names the link and what it printed."""


def add_wired_link(net: Any, node_a: Any, node_b: Any, *, index: int, port_a: int | None = None,
                   port_b: int | None = None, ifname_a: str | None = None, ifname_b: str | None = None,
                   mac_a: str | None = None, mac_b: str | None = None, name: str | None = None) -> WiredLink:
    """Add a shaped/impaired link ``node_a <-> node_b`` to a Mininet ``net`` (before it is built): an emulator
    node ``w<index>`` (its own namespace) spliced in, the ends keeping ports, interface names and MACs as asked.

        wl = add_wired_link(net, h1, s1, index=0, port_b=1)
        net.start(); wl.configure(mtu=1500 + 256)
        wl.start(WireProfile(rate_bps=10_000_000, delay_ns=2_000_000, loss_pct=1.0), get_clock(), seed=1)
    """
    from mininet.link import Link

    from emu.p4switch import P4Host

    w = f"w{index}"
    wnode = net.addHost(w, cls=P4Host, ip=None, mac=None, inNamespace=True)
    net.addLink(node_a, wnode, port1=port_a, port2=0, intfName1=ifname_a, intfName2=f"{w}-eth0", addr1=mac_a,
                addr2=_wire_mac(index, 0), cls=Link)
    net.addLink(wnode, node_b, port1=1, port2=port_b, intfName1=f"{w}-eth1", intfName2=ifname_b,
                addr1=_wire_mac(index, 1), addr2=mac_b, cls=Link)
    return WiredLink(frozenset((node_a.name, node_b.name)), name or f"{node_a.name}:{node_b.name}", wnode,
                     f"{w}-eth0", f"{w}-eth1")


def _wire_mac(index: int, side: int) -> str:
    return f"02:53:fd:{index >> 8:02x}:{index & 0xff:02x}:{side:02x}"


@dataclass
class WiredLink:
    """A shaped/impaired link: one link spliced through a link-emulator node (``add_wired_link``).

    ``start(WireProfile(...), clock, seed)`` runs ``emu.wire`` in the node with that profile in both
    directions: ``rate_bps`` (serialization at the link rate), ``delay_ns`` + ``jitter_ns``, ``loss_pct``,
    ``dup_pct``, ``reorder_pct`` and a ``queue_pkts`` FIFO, all in network time of ``clock`` (its dilation) and
    seeded so runs repeat; ``start`` again changes the profile, ``stop`` ends the emulator (the link then
    carries nothing).  The ends see an ordinary link: names, MACs and addresses are theirs.
    """

    key: frozenset[str]
    name: str                 # "A:B" as faults name links
    node: Any                 # the Mininet host holding both emulator interfaces
    if_a: str
    if_b: str
    profile: WireProfile = field(default_factory=WireProfile)
    proc: subprocess.Popen | None = None

    def start(self, profile: WireProfile, clock: Clock, seed: int) -> None:
        """(Re)start the emulator with ``profile``; returns when it forwards."""
        self.stop()
        argv = [sys.executable, "-m", "emu.wire", "--a", self.if_a, "--b", self.if_b, "--seed", str(seed),
                "--loss", str(profile.loss_pct), "--queue-pkts", str(profile.queue_pkts)]
        if profile.delay_ns:
            argv += ["--delay", f"{profile.delay_ns}ns"]
        if profile.jitter_ns:
            argv += ["--jitter", f"{profile.jitter_ns}ns"]
        if profile.rate_bps:
            argv += ["--rate", str(profile.rate_bps)]
        self.proc = self.node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = _readline(self.proc, WIRE_READY_TIMEOUT_S)
        if line.strip() != "ready":
            err = ""
            if self.proc.poll() is not None and self.proc.stderr:
                err = self.proc.stderr.read().strip()
            self.stop()
            raise LinkEmulatorError(f"link {self.name}: emulator did not start: {err or line.strip() or 'timeout'}")
        self.profile = profile

    def configure(self, mtu: int) -> None:
        """Both emulator interfaces up with ``mtu`` (their offloads are off: the node is a ``P4Host``)."""
        out = self.node.cmd(f"ip link set dev {self.if_a} mtu {mtu} up; ip link set dev {self.if_b} mtu {mtu} up;"
                            " echo rc=$?")
        if not out.strip().endswith("rc=0"):
            raise LinkEmulatorError(f"link {self.name}: configuring its emulator node failed: {out.strip()[-500:]}")

    def stop(self) -> None:
        """Stop the emulator process (the link carries nothing until ``start``)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _readline(proc: subprocess.Popen, timeout_s: float) -> str:
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline() if ready else ""
