"""Start and stop the bridge testbench (``bridge_tb``) as its own process: in a namespace on an interface
(``start_bridge``) or free-running (``free_run``).  ``python -m sw.apps.hil.launch CONFIG.json`` is the process:
cocotb's runner starting the Verilator model ``model.ensure_model`` built."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from emu.netns import Host
from sw.apps.hil.model import TOPLEVEL, HilSizes, build_dir, qp_bits, verilator_on_path
from sw.clock import ENV_DILATION
from sw.roce.softnic.rtl_nic_socket import SocketNicPort

START_TIMEOUT_S = 120.0


class BridgeError(RuntimeError):
    """The testbench process did not come up or ended badly; the message names its log."""

    is_user_error = True


def bridge_config(workdir: Path, sizes: HilSizes, *, ifname: str | None, rate_bps: float = 10e9,
                  free_frames: int = 0, flow: dict[str, Any] | None = None) -> dict[str, Any]:
    """The testbench's configuration (JSON in $HIL_CONFIG): sizes, interface, control socket, results file."""
    return {**asdict(sizes), "qp_bits": qp_bits(sizes), "ifname": ifname, "rate_bps": rate_bps,
            "ctl": str(workdir / "ctl.sock") if ifname else None, "results": str(workdir / "results.json"),
            "workdir": str(workdir), "free_frames": free_frames, "flow": flow, "slice_clocks": 64}


def _argv(cfg: dict[str, Any]) -> list[str]:
    path = Path(cfg["workdir"]) / "config.json"
    path.write_text(json.dumps(cfg))
    return [sys.executable, "-m", "sw.apps.hil.launch", str(path)]


def _env(dilation: float) -> dict[str, str]:
    return dict(os.environ, **{ENV_DILATION: str(dilation)})


class BridgeProcess:
    """One running testbench: its process (killed by its PID's group only), its control socket, its results."""

    def __init__(self, proc: subprocess.Popen, cfg: dict[str, Any]) -> None:
        self.proc, self.cfg = proc, cfg
        self.log = Path(cfg["workdir"]) / "tb.log"

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> SocketNicPort:
        """The host driver's port, once the testbench accepts on its control socket."""
        deadline = time.monotonic() + timeout_s
        while not Path(self.cfg["ctl"]).exists():
            if self.proc.poll() is not None:
                raise BridgeError(f"hil bridge exited ({self.proc.returncode}) before it was ready; see {self.log}")
            if time.monotonic() > deadline:
                raise BridgeError(f"hil bridge not ready after {timeout_s:.0f} s; see {self.log}")
            time.sleep(0.05)
        return SocketNicPort(self.cfg["ctl"])

    def finish(self, port: SocketNicPort, timeout_s: float = 60.0) -> dict[str, Any]:
        """Stop the testbench through ``port``; its final figures."""
        out = port.stop()
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
        return out

    def kill(self, timeout_s: float = 10.0) -> None:
        """SIGKILL the testbench's process group (its own session, started for it): by PID, nothing else;
        returns once no process of the group is left but zombies (the simulator is the launcher's child)."""
        if self.proc.poll() is None or live_in_group(self.proc.pid):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=timeout_s)
        deadline = time.monotonic() + timeout_s
        while live_in_group(self.proc.pid):
            if time.monotonic() > deadline:
                raise BridgeError(f"hil bridge: processes {live_in_group(self.proc.pid)} outlived SIGKILL")
            time.sleep(0.01)


def live_in_group(pgid: int) -> list[int]:
    """PIDs of process group ``pgid`` that are not zombies."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            live.append(int(stat.parent.name))
    return live


def start_bridge(host: Host, cfg: dict[str, Any], dilation: float) -> BridgeProcess:
    """The testbench on ``cfg["ifname"]`` in ``host``'s namespace (the lab kills it on destroy too)."""
    log = (Path(cfg["workdir"]) / "tb.log").open("w")
    proc = host.popen(_argv(cfg), stdout=log, stderr=subprocess.STDOUT, env=_env(dilation))
    return BridgeProcess(proc, cfg)


def free_run(cfg: dict[str, Any]) -> dict[str, Any]:
    """The free-running reference (no interface, no pacing): its figures."""
    log = Path(cfg["workdir"]) / "tb.log"
    with log.open("w") as out:
        proc = subprocess.run(_argv(cfg), stdout=out, stderr=subprocess.STDOUT, env=_env(1.0), check=False)
    results = Path(cfg["results"])
    if proc.returncode != 0 or not results.exists():
        raise BridgeError(f"free-running testbench failed (exit {proc.returncode}); see {log}")
    return json.loads(results.read_text())


def main(argv: list[str]) -> int:
    """The testbench process: run ``bridge_tb`` on the built model with the configuration file ``argv[0]``."""
    from cocotb_tools.runner import get_runner

    cfg = json.loads(Path(argv[0]).read_text())
    sizes = HilSizes(**{k: cfg[k] for k in asdict(HilSizes())})
    verilator_on_path()
    get_runner("verilator").test(
        test_module="sw.apps.hil.bridge_tb", hdl_toplevel=TOPLEVEL, hdl_toplevel_lang="verilog",
        build_dir=build_dir(sizes), test_dir=cfg["workdir"], timescale=("1ns", "1ps"),
        results_xml=str(Path(cfg["workdir"]) / "results.xml"), extra_env={"HIL_CONFIG": json.dumps(cfg)})
    return 0 if Path(cfg["results"]).exists() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
