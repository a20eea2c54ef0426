"""SIGKILL of each long-running command (``fabric up``, ``roce perf --selftest``, ``run``) at several points, then
the next run reaps everything the killed one left (processes, named namespaces, veths, temporary directories,
state) and comes up (issue 24).  A dead switch is shown, not fatal, and can be started again."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.emu

REPO = Path(__file__).resolve().parents[2]
TINY = ["--servers", "2", "--gpus-per-server", "1", "--spines", "0", "--link-rate", "10M"]
MARK = "STARPULSE_CRASH_TEST"
CRASHED: list[int] = []   # pids of the commands killed by the running test (their lab namespaces: sp<pid>-*)


@pytest.fixture
def box() -> Iterator[dict[str, str]]:
    """A private TMPDIR and state dir (short paths: switch control sockets live there) for the commands."""
    root = Path(tempfile.mkdtemp(prefix="sp24c-", dir="/tmp"))
    (root / "t").mkdir()
    env = dict(os.environ, TMPDIR=str(root / "t"), STARPULSE_STATE_DIR=str(root / "s"), PYTHONPATH=str(REPO))
    try:
        yield env
    finally:
        for pid in _marked_pids(env):      # whatever a failing test left: only processes of our runs
            _kill(pid)
        names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        for ns in names:
            if any(ns.startswith(f"sp{pid}-") for pid in CRASHED):
                subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        CRASHED.clear()
        shutil.rmtree(root, ignore_errors=True)


def _start(env: dict[str, str], tag: str, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sw.cli", *argv], env={**env, MARK: tag}, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=False)


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _marked_pids(env: dict[str, str], tag: str | None = None) -> list[int]:
    """Live processes started by our commands (they inherit our TMPDIR; ``tag``: of one run only)."""
    needles = [f"TMPDIR={env['TMPDIR']}".encode()] + ([f"{MARK}={tag}".encode()] if tag else [])
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and int(p.name) != os.getpid()
            and _alive(int(p.name)) and all(_environ_has(int(p.name), n) for n in needles)]


def _cmdlines(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            pass
    return out


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_for(what: str, cond: Callable[[], bool], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _crash(env: dict[str, str], tag: str, argv: list[str], when: Callable[[subprocess.Popen], bool],
           what: str) -> dict[str, object]:
    """Start a command, SIGKILL it when ``when`` holds; what it had made (for the leftover check)."""
    proc = _start(env, tag, *argv)
    CRASHED.append(proc.pid)
    _wait_for(f"{what} ({' '.join(argv)})", lambda: when(proc) or proc.poll() is not None)
    assert proc.poll() is None, f"{' '.join(argv)} ended before the kill point {what}: {proc.stdout.read()}"
    proc.kill()
    proc.wait()
    proc.stdout.close()
    return {"tag": tag, "pid": proc.pid, "what": what}


def _leftovers(env: dict[str, str], crashed: list[dict[str, object]], root_ifs: set[str]) -> list[str]:
    """What the killed runs still have: processes, named namespaces (``sp<pid>-``), root veths, temp dirs."""
    out = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    ifs = os.listdir("/sys/class/net")
    for c in crashed:
        lab = f"sp{c['pid']}"   # emu.netns names of that run: namespaces <lab>-h1, root veths <lab>a0
        out += [f"{c['what']}: process {cmd}" for cmd in _cmdlines(_marked_pids(env, str(c["tag"])))]
        out += [f"{c['what']}: namespace {ns}" for ns in netns if ns.startswith(f"{lab}-")]
        out += [f"{c['what']}: interface {i}" for i in ifs if i.startswith(lab) and i not in root_ifs]
        out += [f"{c['what']}: temp dir {d.name}" for d in Path(env["TMPDIR"]).iterdir() if f"-o{c['pid']}." in d.name]
    return out


def _has_switch(env: dict[str, str], tag: str) -> bool:
    return any("p4.switch" in c for c in _cmdlines(_marked_pids(env, tag)))


def _has(env: dict[str, str], tag: str, text: str) -> bool:
    """A process of run ``tag`` whose command line starts with ``text``."""
    return any(c.startswith(text) for c in _cmdlines(_marked_pids(env, tag)))


def _fabric(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sw.cli", "fabric", *argv, "--name", "crash"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _state(env: dict[str, str]) -> Path:
    return Path(env["STARPULSE_STATE_DIR"]) / "fabric-crash" / "state.json"


def _serving(env: dict[str, str], proc: subprocess.Popen) -> bool:
    """``proc`` (a fabric up) wrote its state file: it is up and serving."""
    try:
        return json.loads(_state(env).read_text())["pid"] == proc.pid
    except (OSError, ValueError, KeyError):
        return False


def test_fabric_up_killed_anywhere_is_reaped_by_the_next(box: dict[str, str]) -> None:
    env = box
    root_ifs = set(os.listdir("/sys/class/net"))
    up = ["fabric", "up", "--name", "crash", *TINY]
    started = time.monotonic()
    crashed = [
        _crash(env, "u1", up, lambda p: time.monotonic() - started > 1.5, "early (1.5 s)"),
        _crash(env, "u2", up, lambda p: _has_switch(env, "u2") and not _state(env).exists(),
               "a switch runs, no state file yet"),
        _crash(env, "u3", up, lambda p: _serving(env, p), "up and serving"),
    ]
    assert any(_marked_pids(env, str(c["tag"])) for c in crashed), "the kills left nothing to reap: no test"
    proc = _start(env, "u4", *up)
    try:
        _wait_for("the next fabric up", lambda: _serving(env, proc) or proc.poll() is not None)
        assert proc.poll() is None, proc.stdout.read()
        assert _leftovers(env, crashed, root_ifs) == []
        status = _fabric(env, "status", "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["switches"]["p0l0"]["alive"], status.stderr
        switch = next(pid for pid in _marked_pids(env, "u4") if "p4.switch" in _cmdlines([pid])[0])
        _kill(switch)                                   # a dead switch: shown and marked, not fatal
        _wait_for("the switch to die", lambda: not _alive(switch), 10)
        text = _fabric(env, "status")
        assert text.returncode == 0 and "p0l0   (DEAD, exit -9)" in text.stdout, text.stdout + text.stderr
        assert json.loads(_fabric(env, "status", "--json").stdout)["switches"]["p0l0"]["state"] == "dead"
        start = _fabric(env, "fault", "switch_start", "p0l0")
        assert start.returncode == 0, start.stderr       # not "it is running"
        assert json.loads(_fabric(env, "status", "--json").stdout)["switches"]["p0l0"]["alive"] is True
    finally:
        subprocess.run([sys.executable, "-m", "sw.cli", "fabric", "down", "--name", "crash"], env=env, cwd=REPO,
                       capture_output=True)
        proc.wait(timeout=60)
        proc.stdout.close()
    assert _leftovers(env, [*crashed, {"tag": "u4", "pid": proc.pid, "what": "clean run"}], root_ifs) == []
    state_dir = Path(env["STARPULSE_STATE_DIR"]) / "fabric-crash"   # only the fault log of the clean run stays
    assert not state_dir.exists() or [p.name for p in state_dir.iterdir()] == ["faults.jsonl"]


def test_roce_perf_selftest_killed_is_reaped_by_the_next(box: dict[str, str]) -> None:
    env = box
    root_ifs = set(os.listdir("/sys/class/net"))
    perf = ["roce", "perf", "--selftest", "--size", "4M", "--link-rate", "20M", "--loss", "1"]
    crashed = [
        _crash(env, "p1", perf, lambda p: any(ln.startswith(f"sp{p.pid}-h2") for ln in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()), "namespaces made"),
        _crash(env, "p2", perf, lambda p: _has(env, "p2", f"{sys.executable} -m sw.apps.perf_selftest client"),
               "mid-traffic"),
    ]
    assert any(_marked_pids(env, str(c["tag"])) for c in crashed), "the kills left nothing to reap: no test"
    done = subprocess.run([sys.executable, "-m", "sw.cli", *perf[:3], "--size", "64K", "--json"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and json.loads(done.stdout)["data_ok"], done.stderr
    assert _leftovers(env, crashed, root_ifs) == []
    assert not [d for d in Path(env["TMPDIR"]).iterdir() if d.is_dir()]


def test_run_killed_mid_job_is_reaped_by_the_next(box: dict[str, str]) -> None:
    env = box
    root_ifs = set(os.listdir("/sys/class/net"))
    run = ["run", "--name", "crashrun", *TINY, "--time-dilation", "1", "--"]
    crashed = [_crash(env, "r1", [*run, "sleep", "60"], lambda p: _has(env, "r1", "sleep 60"), "ranks running")]
    assert any(_marked_pids(env, "r1") for _ in crashed), "the kill left nothing to reap: no test"
    done = subprocess.run([sys.executable, "-m", "sw.cli", *run, "true"], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _leftovers(env, crashed, root_ifs) == []
    assert not [d for d in Path(env["TMPDIR"]).iterdir() if d.is_dir()]


def test_a_dead_switch_is_marked_not_fatal_and_can_be_started() -> None:
    from emu.checks import check_switches_alive
    from emu.cli import print_status
    from emu.fabric import Fabric
    from sw.collectives.fabric_topology import TopologySpec

    with Fabric(TopologySpec(servers=2, gpus_per_server=1, spines=1)) as fab:
        victim = fab.net.switches["sp0"]
        os.kill(victim.proc.pid, signal.SIGKILL)
        victim.proc.wait()
        status = fab.status()
        assert status["switches"]["sp0"]["alive"] is False and status["switches"]["sp0"]["state"] == "dead"
        assert status["switches"]["p0l0"]["alive"] is True and status["switches"]["p0l0"]["ports"]
        check = check_switches_alive(fab)
        assert not check.ok and "sp0" in check.detail and "p0l0" not in check.detail
        print_status("t", status)                           # the text form marks it (no exception)
        fab.faults.apply("switch_start", "sp0")            # not "it is running": it is dead
        assert fab.status()["switches"]["sp0"]["alive"] is True
        assert check_switches_alive(fab).ok
        results = fab.probe([("10.0.0.1", "10.0.0.2")])
        assert all(r["ok"] for r in results)
