"""Topology scripts as users run them (issue 25): each example of ``examples/`` built on the node classes or the
``Fabric`` API runs, prints what it measured and tears down what it made (also on Ctrl-C); a fabric from the API
publishes the same state file as ``starpulse fabric up``; the shipped pytest plugin serves a user's own test."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from emu.fabric import Fabric
from emu.net import Footprint, leftovers
from sw.clock import get_clock, set_clock

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict[str, str]:
    """Our own state directory (never someone's `fabric up`) and a fixed time dilation: no calibration runs."""
    return {**os.environ, "STARPULSE_STATE_DIR": str(tmp_path / "state"), "STARPULSE_TIME_DILATION": "1"}


def _example(tmp_path: Path, name: str, *args: str, timeout_s: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, f"examples/{name}", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout_s, env=_env(tmp_path))


def _wait_file(path: Path, proc: subprocess.Popen, timeout_s: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return json.loads(path.read_text())
        assert proc.poll() is None, f"exited {proc.returncode} before writing {path}"
        time.sleep(0.1)
    raise AssertionError(f"{path} did not appear in {timeout_s} s")


def test_two_leaf_p4_topology_pings_across(tmp_path: Path) -> None:
    done = _example(tmp_path, "two_leaf_p4.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 packets transmitted, 3 received, 0% packet loss" in done.stdout, done.stdout
    rtt_min_ms = float(re.search(r"rtt min/avg/max/mdev = ([\d.]+)/", done.stdout).group(1))
    assert rtt_min_ms >= 10.0, done.stdout               # the emulated leaf-to-leaf link: 5 ms each way
    rx = {int(p): int(n) for p, n in re.findall(r"l1 port (\d): rx (\d+)", done.stdout)}
    assert rx[1] >= 3 and rx[2] >= 3, done.stdout       # h1's pings in on port 1, h2's replies in on port 2


def test_mixed_bridge_and_p4_switch(tmp_path: Path) -> None:
    done = _example(tmp_path, "mixed_bridge_p4.py")
    assert done.returncode == 0, done.stdout + done.stderr
    for line in ("h1 -> 10.0.1.2 via the bridge: 2 packets transmitted, 2 received, 0% packet loss",
                 "h1 -> 10.0.2.3 via bridge + P4: 2 packets transmitted, 2 received, 0% packet loss",
                 "h2 -> 10.0.2.3 via bridge + P4: 2 packets transmitted, 2 received, 0% packet loss"):
        assert line in done.stdout, done.stdout


def test_multi_rail_allreduce_from_the_api(tmp_path: Path) -> None:
    done = _example(tmp_path, "fabric_allreduce.py")
    assert done.returncode == 0, done.stdout + done.stderr
    for rank, addr in enumerate(("10.0.0.1", "10.0.1.1", "10.0.0.2", "10.0.1.2")):   # both rails carry ranks
        assert f"[rank {rank}] rank {rank}/4 on {addr}: allreduce ok (hier)" in done.stdout, done.stdout
    assert "ranks done: exit 0" in done.stdout, done.stdout


def test_incast_reads_int_queue_depth_per_hop(tmp_path: Path) -> None:
    done = _example(tmp_path, "incast_int.py")
    assert done.returncode == 0, done.stdout + done.stderr
    hops = re.findall(r"hop (\d) (\S+)\s+queue (\d+) pkts", done.stdout)
    assert [(n, sw) for n, sw, _ in hops] == [("1", "p0l0"), ("2", "sp0"), ("3", "p1l0")], done.stdout
    depth = {sw: int(q) for _, sw, q in hops}
    assert depth["p1l0"] > 10 and depth["p1l0"] >= max(depth.values()), done.stdout   # the incast's port
    marks = int(re.search(r"ECN marks (\d+)", done.stdout).group(1))
    assert marks > 0, done.stdout


def test_ctrl_c_tears_the_api_fabric_down(tmp_path: Path) -> None:
    """SIGINT while the ranks run: exit 130, and every process, namespace, directory and state file is gone."""
    name = f"exint{os.getpid()}"
    proc = subprocess.Popen([sys.executable, "examples/fabric_allreduce.py", "--name", name], cwd=REPO,
                            env=_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        state = _wait_file(tmp_path / "state" / f"fabric-{name}" / "state.json", proc)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, out + err
    assert "interrupted: fabric torn down" in err, err
    pids = tuple(state["node_pids"].values()) + tuple(p for p, _ in state["processes"])
    assert leftovers(Footprint(pids, (), ())) == []
    assert not Path(state["workdir"]).exists()
    assert not (tmp_path / "state" / f"fabric-{name}" / "state.json").exists()
    assert not Path(state["socket"]).exists()


def _normalized(state: dict[str, Any], state_dir: Path) -> dict[str, Any]:
    """A state file without what differs between any two runs: PIDs, times, names of paths."""
    assert Path(state["workdir"]).name.startswith("starpulse-fabric-")
    assert all(Path(p).name == "ctl.sock" for p in state["switch_ctl"].values())
    return {**state, "pid": None, "up_s": None, "workdir": None, "switch_ctl": sorted(state["switch_ctl"]),
            "socket": str(Path(state["socket"]).relative_to(state_dir)),
            "fault_log": str(Path(state["fault_log"]).relative_to(state_dir)),
            "processes": len(state["processes"]), "node_pids": sorted(state["node_pids"])}


def test_api_and_cli_make_the_same_fabric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("STARPULSE_TIME_DILATION", "1")   # the API sets it (as fabric up does): restored after
    clock = get_clock()
    flags = ["--servers", "2", "--gpus-per-server", "2", "--spines", "1", "--link-rate", "10M", "--pfc", "on",
             "--time-dilation", "2"]
    cli_name, api_name = f"cli{os.getpid()}", f"api{os.getpid()}"
    cli = subprocess.Popen([sys.executable, "-m", "sw.cli", "fabric", "up", *flags, "--name", cli_name], cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with Fabric(servers=2, gpus_per_server=2, spines=1, link_rate="10M", pfc=True, time_dilation=2,
                    name=api_name) as fab:
            cli_state = _wait_file(tmp_path / "state" / f"fabric-{cli_name}" / "state.json", cli)
            api_state = json.loads((tmp_path / "state" / f"fabric-{api_name}" / "state.json").read_text())
            assert api_state["pid"] == os.getpid() and api_state["workdir"] == str(fab.workdir)
            assert api_state["time_dilation"] == fab.clock.dilation == 2.0
            assert (_normalized(api_state, tmp_path / "state" / f"fabric-{api_name}")
                    == _normalized(cli_state, tmp_path / "state" / f"fabric-{cli_name}"))
            status = {}
            for name in (api_name, cli_name):   # the CLI reaches the API's fabric as it reaches its own
                out = subprocess.run([sys.executable, "-m", "sw.cli", "fabric", "status", "--json", "--name", name],
                                     cwd=REPO, capture_output=True, text=True, timeout=120)
                assert out.returncode == 0, out.stderr
                status[name] = json.loads(out.stdout)
            ports = {n: {sw: {p: (v["iface"], v["peer"]) for p, v in s["ports"].items()}
                         for sw, s in st["switches"].items()} for n, st in status.items()}
            assert ports[api_name] == ports[cli_name]
            assert status[api_name]["pfc"]["priority"] == status[cli_name]["pfc"]["priority"] == 3
            down = subprocess.Popen([sys.executable, "-m", "sw.cli", "fabric", "down", "--name", api_name], cwd=REPO,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            with pytest.raises(KeyboardInterrupt):   # `fabric down` from elsewhere ends the script's block
                for _ in range(600):
                    time.sleep(0.1)
        assert down.wait(timeout=60) == 0 and f"fabric {api_name!r} is down" in down.stdout.read()
        assert not (tmp_path / "state" / f"fabric-{api_name}" / "state.json").exists()
    finally:
        set_clock(clock)                                  # the process's one clock, as before the API set it
        subprocess.run([sys.executable, "-m", "sw.cli", "fabric", "down", "--name", cli_name], cwd=REPO,
                       capture_output=True, timeout=150)
        cli.wait(timeout=60)


def test_pytest_plugin_serves_a_users_emulation_test(tmp_path: Path) -> None:
    """The README's test, as a user's file outside the project: the fixture comes from the installed plugin."""
    readme = (REPO / "README.md").read_text()
    snippet = re.search(r"<!-- user test -->\n```python\n(.*?)```\n", readme, re.S)
    assert snippet, "README lacks the user-test snippet"
    (tmp_path / "test_mine.py").write_text(snippet.group(1))
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=150, env=_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b1 passed\b", done.stdout), done.stdout


def test_api_drops_into_the_fabric_mininet_cli(tmp_path: Path) -> None:
    """``fab.cli()`` is the shell of ``fabric up --cli``; leaving it returns to the script, the fabric still up."""
    script = ("from emu.fabric import Fabric\n"
              "with Fabric(servers=2, gpus_per_server=1, spines=1, link_rate='10M') as fab:\n"
              "    fab.cli()\n"
              "    print('after the CLI:', fab.run('s0', 'ping -c 1 -W 2 s1').splitlines()[-2])\n")
    done = subprocess.run([sys.executable, "-c", script], input="pingall\np4 p0l0 port_stats\nexit\n", cwd=REPO,
                          env=_env(tmp_path), capture_output=True,
                          text=True, timeout=150)
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown
    assert "*** Results: 0% dropped (2/2 received" in shown, shown
    assert "p0l0-eth1" in shown, shown    # the switch command's output
    assert "after the CLI: 1 packets transmitted, 1 received, 0% packet loss" in done.stdout, shown
