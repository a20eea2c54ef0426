"""Mininet nodes for P4 switches: ``P4Switch`` runs our embedded target or BMv2 ``simple_switch`` on its ports.

The shape Mininet users know from the P4 tutorials: ``net.addSwitch('s1', cls=P4Switch, program='x.p4',
commands='s1.txt')``.  Ports are the node's interfaces by Mininet port number (``-i N@s1-ethN``); the same
simple_switch_CLI command file configures either backend.  ``P4Host`` turns off checksum/segmentation
offloads, without which frames a software switch copies through AF_PACKET carry unfinished checksums.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from functools import cache
from pathlib import Path
from typing import Any

from mininet.node import Host, Switch

from emu.reap import owned_tempdir
from p4.switch.control import ControlClient
from sw.clock import ENV_DILATION

BACKENDS = ("embedded", "bmv2")
BMV2_TOOLS = ("simple_switch", "simple_switch_CLI", "p4c")
START_TIMEOUT_S = 20.0


class P4SwitchError(RuntimeError):
    """A P4 switch node cannot be created or started; the message names what is missing or what failed."""

    is_user_error = True


def missing_bmv2_tools() -> list[str]:
    """The BMv2 programs (simple_switch, simple_switch_CLI, p4c) not found on PATH."""
    return [t for t in BMV2_TOOLS if shutil.which(t) is None]


class P4Host(Host):
    """A Mininet host with checksum/segmentation offloads off and IPv6 off, so its frames cross a software switch
    intact (``net.addHost("h1", cls=P4Host)``); ``emu.net.RoceHost`` adds the fabric servers' NIC settings."""

    def config(self, **params):
        result = super().config(**params)
        for intf in self.intfList():
            if intf.name == "lo":
                continue
            self.cmd(f"ethtool --offload {intf.name} rx off tx off sg off tso off gso off gro off")
        self.cmd("sysctl -qw net.ipv6.conf.all.disable_ipv6=1")
        return result


CONTROLS = ("cli", "p4runtime")
"""How ``run_command_file`` programs an embedded switch: its control socket, or P4Runtime for the table lines."""


@cache
def _compiled(program: str) -> Any:
    """The compiled program a P4Runtime controller translates the fabric's table commands with (once per file)."""
    from p4.switch.pipeline_adapter import compile_cached

    return compile_cached(program)


class P4Switch(Switch):
    """A Mininet switch whose data plane is a P4_16 v1model program, in its own namespace by default.

        net.addSwitch("s1", cls=P4Switch, program="p4/programs/basic.p4", commands="s1.txt", inNamespace=True)

    - ``program``: the .p4 file (compiled at start).  ``backend``: ``"embedded"`` (this project's target,
      ``python -m p4.switch``) or ``"bmv2"`` (``simple_switch``; needs p4c and BMv2 on PATH).
    - ``commands``: a simple_switch_CLI command file applied once the switch runs (the same file works for
      both backends); later ``sw.cli("table_add ...")`` or ``sw.run_command_file(path)``.
    - ports are the node's interfaces by Mininet port number (``addLink(..., port2=N)`` is port N).
    - ``pcap_dir``: every port writes ``<iface>_in.pcap`` / ``_out.pcap`` there.  ``log_file``/``log_level``.
    - ``priority_queues``: egress queues per port (1 as BMv2's default; the fabric runs 8).  PFC (embedded
      backend) is switched on by commands: ``pfc_enable PORT 1 [PRIOS]``, ``pfc_thresholds``,
      ``pfc_dscp_map``; port shaping by ``set_port_rate PORT BPS`` (BMv2: ``set_queue_rate``).
    - ``dilation``: the time-dilation factor of the switch's clock (queues, shaping, INT timestamps); default
      the one clock's, ``$STARPULSE_TIME_DILATION``, so switches, link emulators and NICs agree.
    - ``device_id`` (INT node id, default the dpid), ``ctl`` (embedded control socket), ``thrift_port``
      (BMv2), ``cpu_port``.  ``cli(cmd)`` runs one simple_switch_CLI command, ``alive()`` says if it runs.
    """

    def __init__(self, name: str, program: str | None = None, *, backend: str = "embedded",
                 commands: str | None = None, device_id: int | None = None, ctl: str | None = None,
                 thrift_port: int | None = None, pcap_dir: str | None = None, log_file: str | None = None,
                 log_level: str = "info", cpu_port: int | None = None, priority_queues: int = 1,
                 dilation: float | None = None, control: str = "cli", **params) -> None:
        if program is None:
            raise P4SwitchError(f"switch {name}: a P4Switch needs program='PROG.p4'")
        if backend not in BACKENDS:
            raise P4SwitchError(f"switch {name}: backend {backend!r}: allowed {', '.join(BACKENDS)}")
        if backend == "bmv2":
            missing = missing_bmv2_tools()
            if missing:
                raise P4SwitchError(
                    f"switch {name}: backend 'bmv2' needs {', '.join(missing)} on PATH (not installed here);"
                    " install BMv2 and p4c, or use backend='embedded'")
        if not Path(program).is_file():
            raise P4SwitchError(f"switch {name}: program {program!r} does not exist")
        if control not in CONTROLS or (control == "p4runtime" and backend != "embedded"):
            raise P4SwitchError(f"switch {name}: control {control!r}: allowed {', '.join(CONTROLS)} (p4runtime "
                                "with the embedded backend)")
        super().__init__(name, **params)
        self.program = str(Path(program).resolve())
        self.backend = backend
        self.commands = commands
        self.device_id = device_id if device_id is not None else int(self.dpid, 16)
        self._workdir = owned_tempdir(f"starpulse-{name}-")   # a killed run's is reaped by the next (emu.reap)
        self.ctl = ctl or str(self._workdir / "ctl.sock")
        self.thrift_port = thrift_port or 9090 + self.device_id
        self.pcap_dir = pcap_dir
        self.log_file = log_file or str(self._workdir / "switch.log")
        self.log_level = log_level
        self.cpu_port = cpu_port
        self.priority_queues = priority_queues
        if dilation is not None and not dilation > 0:
            raise P4SwitchError(f"switch {name}: dilation {dilation!r}: must be > 0")
        self.dilation = dilation
        self.proc: subprocess.Popen | None = None
        self.control = control
        self.grpc = f"unix:{self._workdir / 'p4runtime.sock'}"   # served when control == "p4runtime"

    # --- lifecycle -------------------------------------------------------------------------------------------
    def _port_args(self) -> list[str]:
        args: list[str] = []
        for port, intf in sorted(self.intfs.items()):
            if intf.name != "lo":
                args += ["-i", f"{port}@{intf.name}"]
        return args

    def _embedded_argv(self) -> list[str]:
        argv = [sys.executable, "-m", "p4.switch", self.program, *self._port_args(),
                "--device-id", str(self.device_id), "--ctl", self.ctl, "--log-file", self.log_file,
                "--log-level", self.log_level, "--priority-queues", str(self.priority_queues)]
        if self.pcap_dir:
            argv += ["--pcap", self.pcap_dir]
        if self.cpu_port is not None:
            argv += ["--cpu-port", str(self.cpu_port)]
        if self.control == "p4runtime":
            argv += ["--grpc-port", self.grpc]
        if self.commands:
            argv += ["--commands", str(Path(self.commands).resolve())]
        return argv

    def _bmv2_argv(self) -> list[str]:
        json_path = self._workdir / (Path(self.program).stem + ".json")
        out = subprocess.run(["p4c", "--target", "bmv2", "--arch", "v1model", "-o", str(self._workdir),
                              self.program], capture_output=True, text=True)
        if out.returncode != 0:
            raise P4SwitchError(f"switch {self.name}: p4c failed on {self.program}: {out.stderr.strip()}")
        argv = ["simple_switch", *self._port_args(), "--device-id", str(self.device_id),
                "--thrift-port", str(self.thrift_port), "--log-file", self.log_file]
        if self.pcap_dir:
            argv += ["--pcap", self.pcap_dir]
        argv.append(str(json_path))
        if self.priority_queues > 1:          # simple_switch's target-specific options follow "--"
            argv += ["--", "--priority-queues", str(self.priority_queues)]
        # (simple_switch has no CPU-port option: its CPU port is whichever interface is bound to that number)
        return argv

    def start(self, controllers) -> None:
        """Start the switch process on this node's interfaces and wait until it forwards."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                          env.get("PYTHONPATH", "")]))
        if self.dilation is not None:
            env[ENV_DILATION] = f"{self.dilation:g}"
        for intf in self.intfList():
            if intf.name != "lo":      # no GRO/TSO: a software switch must see and send wire-sized frames
                self.cmd(f"ethtool --offload {intf.name} gro off lro off tso off gso off")
        argv = self._embedded_argv() if self.backend == "embedded" else self._bmv2_argv()
        self.proc = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        if self.backend == "embedded":
            self._wait_ready()
        else:
            self._wait_thrift()
            if self.commands:
                self.run_command_file(self.commands)

    def _wait_ready(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if ready:
                line = self.proc.stdout.readline().decode(errors="replace").strip()
                if line == "ready":
                    return
            if self.proc.poll() is not None:
                break
        err = self._stderr_tail()
        self.stop_process()
        raise P4SwitchError(f"switch {self.name} did not start: {err or 'no output'}")

    def _wait_thrift(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise P4SwitchError(f"switch {self.name}: simple_switch exited: {self._stderr_tail()}")
            out = self.cmd(f"ss -ltn 'sport = :{self.thrift_port}'")
            if f":{self.thrift_port}" in out:
                return
            time.sleep(0.1)
        raise P4SwitchError(f"switch {self.name}: simple_switch not listening on {self.thrift_port}")

    def _stderr_tail(self) -> str:
        if self.proc is None or self.proc.stderr is None or self.proc.poll() is None:
            return ""
        return self.proc.stderr.read().decode(errors="replace").strip()[-2000:]

    def alive(self) -> bool:
        """True while the switch process runs (one killed from outside keeps its ``proc`` object, not its life)."""
        return self.proc is not None and self.proc.poll() is None

    def stop_process(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        self.proc = None

    def stop(self, deleteIntfs: bool = True) -> None:  # Mininet's signature
        self.stop_process()
        shutil.rmtree(self._workdir, ignore_errors=True)
        super().stop(deleteIntfs)

    # --- control plane ---------------------------------------------------------------------------------------
    def cli(self, command: str) -> str:
        """Run one simple_switch_CLI command on this switch (either backend); returns its output."""
        if self.backend == "embedded":
            with ControlClient(self.ctl) as client:
                return client.run(command)
        return self._bmv2_cli(command + "\n")

    def run_command_file(self, path: str) -> str:
        """Apply a simple_switch_CLI command file, as ``simple_switch_CLI < path`` would."""
        text = Path(path).read_text()
        if self.backend == "bmv2":
            return self._bmv2_cli(text)
        if self.control == "p4runtime":
            text = "\n".join(self._write_p4runtime(text.splitlines()))
        outputs = []
        with ControlClient(self.ctl) as client:
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    outputs.append(client.run(line))
        return "\n".join(o for o in outputs if o)

    def _write_p4runtime(self, lines: list[str]) -> list[str]:
        """Write the table lines as one P4Runtime WriteRequest (as the primary controller, after checking the
        switch runs this P4Info); returns the other lines, which go through the control socket."""
        from p4.runtime.cli_updates import cli_updates
        from p4.runtime.client import P4RuntimeClient

        program = _compiled(self.program)
        updates, rest = cli_updates(program, lines)
        with P4RuntimeClient(self.grpc, device_id=self.device_id) as client:
            client.arbitrate()
            if updates:
                client.write(updates)
        return rest

    def _bmv2_cli(self, text: str) -> str:
        out = subprocess.run(["simple_switch_CLI", "--thrift-port", str(self.thrift_port)], input=text,
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise P4SwitchError(f"switch {self.name}: simple_switch_CLI failed: {out.stderr.strip()}")
        return out.stdout
