"""``starpulse fabric up --cli`` driven through a pseudo-terminal as a Mininet user would: pingall, iperf, link
down/up, INT, a bad command and a failing one (one error line, the prompt back, the fabric still up), Ctrl-C at
the prompt, exit; afterwards no process or namespace of the fabric is left."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from emu.net import Footprint, leftovers

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]
PROMPT = "mininet> "
LINK_RATE_BPS = 10_000_000   # a rate the software switches keep up with on a loaded 2-core machine
_RATE = re.compile(r"'([\d.]+)([KMGT]?)b/s'")
_SCALE = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def _bps(text: str) -> list[float]:
    return [float(v) * _SCALE[p] for v, p in _RATE.findall(text)]


class Shell:
    """The CLI in a pseudo-terminal: ``run`` sends one line and returns what it printed before the next prompt."""

    def __init__(self, child: pexpect.spawn) -> None:
        self.child = child

    def run(self, line: str, timeout: float = 30) -> str:
        self.child.sendline(line)
        self.child.expect_exact(PROMPT, timeout=timeout)
        out = self.child.before.replace("\r\n", "\n")
        return out.split("\n", 1)[1] if "\n" in out else ""   # without the echoed command line


def test_mininet_cli_on_the_fabric(tmp_path: Path) -> None:
    name = f"sh{os.getpid()}"
    env = dict(os.environ, STARPULSE_STATE_DIR=str(tmp_path))
    child = pexpect.spawn(sys.executable, ["-m", "emu.cli", "up", "--name", name, "--servers", "2",
                                           "--gpus-per-server", "2", "--spines", "2", "--link-rate", "10M", "--cli"],
                          cwd=str(REPO), env=env, encoding="utf-8", timeout=60, dimensions=(50, 200))
    sh = Shell(child)
    state_file = tmp_path / f"fabric-{name}" / "state.json"
    try:
        child.expect_exact(PROMPT, timeout=90)
        state = json.loads(state_file.read_text())
        netns = tuple(os.stat(f"/proc/{pid}/ns/net").st_ino for pid in state["node_pids"].values())
        footprint = Footprint(tuple(pid for pid, _ in state["processes"]), netns, ())

        out = sh.run("pingall")
        assert "*** Results: 0% dropped (8/8 received; 4 NIC pairs on their own rail, 4 across rails)" in out, out
        assert "s0-eth0 -> s1-eth0 s1-eth1" in out
        other = subprocess.run([sys.executable, "-m", "emu.cli", "status", "--name", name], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=60)   # other shells reach it meanwhile
        assert other.returncode == 0 and "p0l0-eth1" in other.stdout, other.stderr

        # TCP goodput over 1500-byte frames is at most ~94 % of the line rate the switches shape to; more than
        # the line rate would mean the shaper is gone, under half a broken path (load costs a little, not half)
        out = sh.run("iperf s0 s1", timeout=60)
        assert "between s0-eth0 (10.0.0.1) and s1-eth0 (10.0.0.2), rail 0" in out, out
        server_bps, client_bps = _bps(out.split("*** Results:")[1])
        assert 0.5 * LINK_RATE_BPS <= server_bps <= 1.02 * LINK_RATE_BPS, out
        assert client_bps <= 1.05 * LINK_RATE_BPS, out

        assert "link_down s0:p0l0: ok" in sh.run("link s0 p0l0 down")
        down = sh.run("s0 ping -c 1 -W 1 s1")
        assert "1 received" not in down and ("unreachable" in down or "0 received" in down), down
        assert "link_up s0:p0l0: ok" in sh.run("link s0 p0l0 up")
        assert re.search(r"[12] received", sh.run("s0 ping -c 2 -W 2 s1")), "no ping after link up"

        # a leaf-spine link down: its leaf's ECMP group loses it, so every path crosses the other spine
        assert "link_down p0l0:sp0: ok" in sh.run("link p0l0 sp0 down")
        out = sh.run("int s0:0 s1:1")
        assert out.count("3 INT hop(s)") == 2 and "sp1" in out and "sp0" not in out, out
        assert "link_up p0l0:sp0: ok" in sh.run("link p0l0 sp0 up")

        out = sh.run("frobnicate now")
        assert out.strip() == "*** Unknown command: frobnicate now (help lists the commands)", out
        out = sh.run("fault link_down s0:sp0")      # raises inside the command
        assert out.strip().startswith("*** Error: fault: link 's0:sp0': no such link"), out
        assert len(out.strip().splitlines()) == 1, out
        out = sh.run("iperf s0")
        assert out.strip().startswith("*** Error: iperf: usage: iperf"), out

        child.sendintr()                            # Ctrl-C at the prompt: a new prompt, the fabric stays
        child.expect_exact("Interrupt", timeout=10)
        child.expect_exact(PROMPT, timeout=10)
        assert "1 received" in sh.run("s0 ping -c 1 -W 2 s1:1")
        assert "p0l0-eth1" in sh.run("p4 p0l0 port_stats")
        out = sh.run("status")
        assert f"fabric '{name}' (embedded)" in out and "sp1-eth2" in out, out

        child.sendline("exit")
        child.expect_exact(f"fabric '{name}' down", timeout=60)
        child.expect(pexpect.EOF, timeout=30)
        child.close()
        assert child.exitstatus == 0
        assert leftovers(footprint) == []
        assert not state_file.exists() and not Path(state["workdir"]).exists()
    finally:
        if child.isalive():
            child.kill(signal.SIGTERM)               # the shell returns and the fabric tears down
            child.expect(pexpect.EOF, timeout=60)
            child.close(force=True)
        subprocess.run([sys.executable, "-m", "emu.cli", "status", "--name", name], cwd=REPO, env=env,
                       capture_output=True, timeout=60)   # reaps what a killed `up` left, if anything
