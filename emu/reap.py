"""What a run killed with SIGKILL leaves behind (processes, namespaces, veths, temporary directories), found and
removed by the next run.

The owner of a run is named ``o<pid>.<start time>`` (the pair names one process for good: pids are reused, start
times are not).  The first ``owned_tempdir()`` of a process exports its name as ``$STARPULSE_OWNER``, so every
process it starts (node shells, switches, link emulators, probes, ranks: whatever namespace they run in) carries
it; every temporary directory it makes is named ``<prefix>o<pid>.<start>-XXXX`` and may hold ``owned.json``: the
named network namespaces, root-namespace interfaces and state directory the run creates, recorded before it
creates them.  ``reap_dead()`` kills the processes whose owner no longer runs, deletes the namespaces and
interfaces their directories name, and the directories.  It never touches what a live process owns, so parallel
runs are safe.
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
OWNER_ENV = "STARPULSE_OWNER"
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
    os.environ[OWNER_ENV] = owner_tag()   # inherited by every process started from here on
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


def _orphans() -> list[tuple[int, int]]:
    """(pid, start time) of every process whose ``$STARPULSE_OWNER`` no longer runs."""
    out = []
    dead: dict[bytes, bool] = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            env = (p / "environ").read_bytes()
        except OSError:
            continue
        i = env.find(f"{OWNER_ENV}=o".encode())
        if i < 0 or (i and env[i - 1] != 0):
            continue
        tag = env[i + len(OWNER_ENV) + 2:].split(b"\0", 1)[0]
        if tag not in dead:
            pid_s, _, start_s = tag.partition(b".")
            dead[tag] = not (pid_s.isdigit() and start_s.isdigit()) or start_time(int(pid_s)) != int(start_s)
        if dead[tag] and (t := start_time(int(p.name))) is not None:
            out.append((int(p.name), t))
    return out


def reap_dead(clock: Clock | None = None) -> list[str]:
    """Reap what owners that are gone left (see the module doc); what was removed."""
    clock = clock or get_clock()
    orphans = _orphans()
    out = [f"{len(orphans)} process(es)"] if orphans else []
    stop_tracked(orphans, clock, timeout_ns=1_000_000_000)
    for entry in sorted(Path(tempfile.gettempdir()).iterdir()):
        if not _owner_dead(entry.name) or not entry.is_dir():
            continue
        try:
            data = json.loads((entry / RECORD).read_text())
        except (OSError, json.JSONDecodeError):
            data = {}
        if data.get("keep"):   # e.g. the logs of a failed run, whose path the user was given
            continue
        reap_record(data, clock)
        shutil.rmtree(entry, ignore_errors=True)
        out.append(str(entry))
    return out


def reap_record(data: dict[str, Any], clock: Clock) -> int:
    """Kill the processes an ``owned.json`` names and those left in its named namespaces, delete those and its
    interfaces, and remove the stale state directory it names; how many processes were stopped."""
    procs = [(int(p), int(t)) for p, t in data.get("processes", [])]
    for ns in data.get("netns", []):
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        procs += [(int(p), t) for p in out.stdout.split() if (t := start_time(int(p))) is not None]
    stopped = stop_tracked(sorted(set(procs)), clock, timeout_ns=1_000_000_000)
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
