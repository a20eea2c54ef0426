"""``starpulse fabric`` as users run it: bad flags give one clear line, test/up/status/fault/down work end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]
UP_TIMEOUT_S = 180    # fabric up calibrates its time dilation first (auto, the default): more on a loaded machine


def _cli(*argv: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emu.cli", *argv], capture_output=True, text=True, cwd=REPO,
                          env=env, timeout=timeout)


@pytest.mark.parametrize(("argv", "flag"), [
    (["--servers", "3", "--pods", "2"], "--servers 3"),
    (["--servers", "0"], "--servers 0"),
    (["--gpus-per-server", "17"], "--gpus-per-server 17"),
    (["--spines", "0", "--pods", "2", "--servers", "4"], "--spines 0"),
    (["--link-rate", "10X"], "--link-rate '10X'"),
    (["--delay", "soon"], "--delay 'soon'"),
    (["--mtu", "20000"], "--mtu 20000"),
    (["--backend", "tofino"], "--backend tofino"),
    (["--oversubscription", "0.5"], "--oversubscription 0.5"),
])
def test_bad_topology_option_is_one_clear_line(argv: list[str], flag: str) -> None:
    out = _cli("test", *argv, timeout=60)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("starpulse fabric: error: ") and flag in lines[0], out.stderr


def test_fabric_test_json_passes_every_check() -> None:
    out = _cli("test", "--servers", "2", "--gpus-per-server", "2", "--spines", "2", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is True
    assert [c["name"] for c in report["checks"]] == ["reachability", "mtu", "int_hops", "ecmp_spread", "reroute",
                                                  "ecn_curve", "int_queue", "switches"]
    assert all(c["ok"] for c in report["checks"])
    assert report["topology"]["servers"] == 2 and report["up_s"] > 0 and report["down_s"] > 0


def test_up_status_fault_down_from_other_processes(tmp_path: Path) -> None:
    env = dict(os.environ, STARPULSE_STATE_DIR=str(tmp_path))
    name = f"t{os.getpid()}"
    up = subprocess.Popen([sys.executable, "-m", "emu.cli", "up", "--servers", "2", "--gpus-per-server", "2",
                           "--spines", "2", "--name", name], cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    try:
        state = tmp_path / f"fabric-{name}" / "state.json"
        deadline = time.monotonic() + UP_TIMEOUT_S
        while not state.exists():
            assert up.poll() is None, up.stderr.read() if up.stderr else ""
            assert time.monotonic() < deadline, f"no state file after {UP_TIMEOUT_S} s"
            time.sleep(0.1)
        recorded = json.loads(state.read_text())
        assert recorded["pid"] == up.pid
        assert recorded["time_dilation"] >= 1                       # auto's choice, recorded for run/bench
        assert set(recorded["node_pids"]) == {"s0", "s1", "p0l0", "p0l1", "sp0", "sp1"}

        again = _cli("up", "--name", name, env=env, timeout=60)
        assert again.returncode == 2 and "already running" in again.stderr

        status = _cli("status", "--json", "--name", name, env=env, timeout=60)
        assert status.returncode == 0, status.stderr
        assert set(json.loads(status.stdout)["switches"]) == {"p0l0", "p0l1", "sp0", "sp1"}
        port = json.loads(status.stdout)["switches"]["p0l0"]["ports"]["1"]
        assert {"rx_kernel_drops", "queue_drop_pkts", "pipeline_drop_pkts"} <= set(port)
        hosts = json.loads(status.stdout)["hosts"]
        assert set(hosts) == {"s0", "s1"} and set(hosts["s0"]["nics"]) == {"s0-eth0", "s0-eth1"}
        assert {"udp_rcvbuf_errors", "udp_in_errors"} <= set(hosts["s0"])
        assert list(json.loads(status.stdout)["fidelity"]) == ["time_dilation", "bound_ns", "late_share",
                                                               "lag_p99_ns", "lag_max_ns", "worst_component", "ok"]

        fault = _cli("fault", "link_down", "p0l0:sp0", "--name", name, env=env, timeout=60)
        assert fault.returncode == 0 and "link_down p0l0:sp0: ok" in fault.stdout, fault.stderr
        text = _cli("status", "--name", name, env=env, timeout=60)
        assert "p0l0:sp0" in text.stdout and "p0l0-eth3" in text.stdout
        bad = _cli("fault", "link_down", "nowhere:sp0", "--name", name, env=env, timeout=60)
        assert bad.returncode == 2 and "no such link" in bad.stderr

        down = _cli("down", "--name", name, env=env, timeout=120)
        assert down.returncode == 0, down.stderr
        assert up.wait(timeout=60) == 0
        assert not state.exists()
        log = [json.loads(line) for line in (tmp_path / f"fabric-{name}" / "faults.jsonl").read_text().splitlines()]
        assert [(e["action"], e["ok"]) for e in log] == [("link_down", True), ("link_down", False)]
    finally:
        if up.poll() is None:
            up.terminate()
            up.wait(timeout=60)


def test_status_and_down_without_a_running_fabric(tmp_path: Path) -> None:
    env = dict(os.environ, STARPULSE_STATE_DIR=str(tmp_path))
    status = _cli("status", "--name", "nothing", env=env, timeout=60)
    assert status.returncode == 2 and "no fabric named 'nothing' is running" in status.stderr
    down = _cli("down", "--name", "nothing", env=env, timeout=60)
    assert down.returncode == 0 and "no fabric" in down.stdout


def test_a_killed_up_process_leaves_nothing_after_the_next_command(tmp_path: Path) -> None:
    env = dict(os.environ, STARPULSE_STATE_DIR=str(tmp_path))
    name = f"k{os.getpid()}"
    up = subprocess.Popen([sys.executable, "-m", "emu.cli", "up", "--servers", "2", "--spines", "1", "--name", name],
                          cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / f"fabric-{name}" / "state.json"
    try:
        deadline = time.monotonic() + UP_TIMEOUT_S
        while not state.exists():
            assert up.poll() is None and time.monotonic() < deadline, "fabric did not come up"
            time.sleep(0.1)
        saved = json.loads(state.read_text())
        recorded = saved["processes"]
        assert len(recorded) == 3 + 5          # 3 switch processes, 5 node shells
    finally:
        up.kill()                              # no chance to tear down
        up.wait(timeout=30)
    status = _cli("status", "--name", name, env=env, timeout=60)
    # it says what it stopped, unless any other starpulse command reaped the orphans first (emu.reap)
    assert status.returncode == 2 and "no fabric named" in status.stderr
    for pid, start in recorded:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[19]) == start:           # the same process (not a reused pid)
            assert fields[0] == "Z", f"pid {pid} still runs"
    assert not state.exists()
    assert not Path(saved["workdir"]).exists()
