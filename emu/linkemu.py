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


@dataclass
class WiredLink:
    """One link spliced through an emulator node: its names, the running process and its current profile."""

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

    def stop(self) -> None:
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
