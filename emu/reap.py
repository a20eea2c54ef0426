"""What a run killed with SIGKILL leaves behind (processes, namespaces, veths, temporary directories), found and
removed by the next run.

Every temporary directory a run makes is named with its owner, ``<prefix>o<pid>.<start time>-XXXX`` (the pair
names one process for good: pids are reused, start times are not).  A directory may hold ``owned.json``: the
processes (pid, start time), named network namespaces and root-namespace interfaces the run created, recorded
before it creates them.  ``reap_dead()`` finds directories whose owner no longer runs, kills every process in
the network namespaces of their recorded processes (switches, link emulators, ranks: all inside), then the
processes themselves, deletes their namespaces and interfaces and the directory.  It never touches what a live
process owns, so parallel runs are safe.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from sw.clock import Clock, get_clock

RECORD = "owned.json"
_OWNED_RE = re.compile(r"^(?:starpulse|sp)-.*?-o(\d+)\.(\d+)-[^/]+$")


def start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` (clock ticks since boot): with the pid it names one process for good."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def owner_tag(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"o{pid}.{start_time(pid)}"


def owned_tempdir(prefix: str) -> Path:
    """A new temporary directory named with this process as its owner (``prefix`` starts with 'starpulse-' or
    'sp-'); first reaps what dead runs left."""
    reap_dead()
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{owner_tag()}-"))


def record(directory: Path, **items: Any) -> None:
    """Merge ``items`` into the directory's ``owned.json`` (lists are extended), atomically."""
    path = directory / RECORD
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        data = {}
    for key, value in items.items():
        if isinstance(value, list):
            data[key] = [*data.get(key, []), *(v for v in value if v not in data.get(key, []))]
        else:
            data[key] = value
    tmp = directory / f".{RECORD}.{os.getpid()}"
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def _owner_dead(name: str) -> bool:
    m = _OWNED_RE.match(name)
    return m is not None and start_time(int(m.group(1))) != int(m.group(2))


def reap_dead(clock: Clock | None = None) -> list[str]:
    """Reap every owned temporary directory whose owner is gone (see the module doc); what was removed."""
    out = []
    for entry in sorted(Path(tempfile.gettempdir()).iterdir()):
        if not _owner_dead(entry.name) or not entry.is_dir():
            continue
        try:
            data = json.loads((entry / RECORD).read_text())
        except (OSError, json.JSONDecodeError):
            data = {}
        reap_record(data, clock or get_clock())
        shutil.rmtree(entry, ignore_errors=True)
        out.append(str(entry))
    return out


def reap_record(data: dict[str, Any], clock: Clock) -> int:
    """Kill what an ``owned.json`` names (processes in its processes' namespaces first), delete its named
    namespaces and interfaces, and remove the stale state directory it names; how many processes were stopped."""
    procs = [(int(p), int(t)) for p, t in data.get("processes", [])]
    inodes = {_netns_inode(pid) for pid, t in procs if start_time(pid) == t} - {_netns_inode(os.getpid()), None}
    for ns in data.get("netns", []):
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        procs += [(int(p), t) for p in out.stdout.split() if (t := start_time(int(p))) is not None]
    procs += [(pid, t) for pid in _pids_in(inodes) if (t := start_time(pid)) is not None]
    stopped = stop_tracked(sorted(set(procs)), clock)
    for ifname in data.get("links", []):
        subprocess.run(["ip", "link", "delete", ifname], capture_output=True)
    for ns in data.get("netns", []):
        subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
    state_dir = data.get("state_dir")
    if state_dir:
        _remove_stale_state(Path(state_dir))
    return stopped


def _remove_stale_state(d: Path) -> None:
    """A ``fabric up`` state directory whose process is gone: its state file and socket, then the directory."""
    try:
        pid = int(json.loads((d / "state.json").read_text()).get("pid", 0))
    except (OSError, json.JSONDecodeError, ValueError):
        pid = 0
    if pid and start_time(pid) is not None:
        return
    for f in ("state.json", "fabric.sock"):
        with contextlib.suppress(OSError):
            (d / f).unlink()
    with contextlib.suppress(OSError):
        d.rmdir()


def _netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _pids_in(inodes: set[int | None]) -> list[int]:
    """Every process whose network namespace is one of ``inodes``."""
    if not inodes:
        return []
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _netns_inode(int(p.name)) in inodes]


def stop_tracked(procs: list[tuple[int, int]], clock: Clock, timeout_ns: int = 5_000_000_000) -> int:
    """SIGTERM (then SIGKILL) exactly these processes if they still run (same pid and start time); how many."""
    alive = [pid for pid, t in procs if start_time(pid) == t]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = clock.now_ns() + timeout_ns
    while clock.now_ns() < deadline and any(start_time(pid) == t for pid, t in procs):
        clock.sleep_ns(50_000_000)
    for pid, t in procs:
        if start_time(pid) == t:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return len(alive)
