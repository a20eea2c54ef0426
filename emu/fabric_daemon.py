"""The fabric daemon: the long-running process of ``starpulse fabric up`` that holds the Mininet net and serves
its JSON-lines control socket next to a state file (``$STARPULSE_STATE_DIR/fabric-<name>/``, default under
/tmp), so ``status``, ``fault`` and ``down`` from other shells (and ``starpulse run|bench --name``) reach it.

``emu.cli`` parses and prints; this module keeps the state directory, the socket and the up/serve/down loop.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from sw.clock import get_clock
from sw.units.jsonl_socket import JsonLineStream, connect

STATE_ENV = "STARPULSE_STATE_DIR"
DEFAULT_NAME = "default"
SERVE_POLL_S = 0.5
MAX_REQUEST_BYTES = 1 << 20
MAX_NAME_CHARS = 48            # the control socket's path must fit a Unix socket address (108 bytes)


class FabricCliError(RuntimeError):
    """Bad use of ``starpulse fabric`` (a bad flag value, no running fabric, one already running)."""

    is_user_error = True


def state_dir(name: str) -> Path:
    base = Path(os.environ.get(STATE_ENV) or "/tmp/starpulse-state")
    shown = name if len(name) <= MAX_NAME_CHARS else f"{name[:MAX_NAME_CHARS]}... ({len(name)} characters)"
    if not name.replace("-", "").replace("_", "").isalnum() or not name.isascii():
        raise FabricCliError(f"--name {shown!r}: use letters, digits, '-' and '_'")
    if len(name) > MAX_NAME_CHARS:
        raise FabricCliError(f"--name {shown!r}: at most {MAX_NAME_CHARS} characters (the control socket's path "
                             "must fit a Unix socket address)")
    return base / f"fabric-{name}"


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def read_state(name: str) -> dict[str, Any] | None:
    """The running fabric's state (pid, socket, topology) or None; stale state of a dead process is removed, and
    what runs killed before writing theirs left behind is reaped (``emu.reap``)."""
    from emu.reap import reap_dead

    path = state_dir(name) / "state.json"
    try:
        state = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        state = None
    if state is not None and not pid_alive(int(state.get("pid", 0))):
        _reap_orphans(name, state)   # first: it says what it stopped
        state = None
    reap_dead()
    return state


def _reap_orphans(name: str, state: dict[str, Any]) -> None:
    """The ``up`` process died without tearing down (e.g. SIGKILL): stop the switch processes and node shells
    it recorded (only those exact processes), so their namespaces and veths go too; then forget the state."""
    from emu.fabric import WORKDIR_PREFIX
    from emu.reap import stop_tracked

    procs = [(int(p), int(t)) for p, t in state.get("processes", [])]
    stopped = stop_tracked(procs, get_clock()) if procs else 0
    workdir = Path(state.get("workdir") or "/nonexistent")
    if workdir.name.startswith(WORKDIR_PREFIX):
        shutil.rmtree(workdir, ignore_errors=True)
    if stopped:
        print(f"fabric {name!r}: its process {state.get('pid')} was gone; stopped {stopped} leftover "
              "switch/node process(es)", file=sys.stderr)
    remove_state(name)


def remove_state(name: str) -> None:
    d = state_dir(name)
    for f in ("state.json", "fabric.sock"):
        with contextlib.suppress(OSError):
            (d / f).unlink()
    with contextlib.suppress(OSError):
        d.rmdir()


def claim_state_dir(name: str) -> Path:
    """The state directory of a fabric about to come up as ``name``; an error if one by that name runs."""
    d = state_dir(name)
    existing = read_state(name)
    if existing is not None:
        raise FabricCliError(f"a fabric named {name!r} is already running (pid {existing['pid']}); "
                             "run `starpulse fabric down` first or pick another --name")
    return d


def request(name: str, req: dict[str, Any], timeout_s: float = 120.0) -> dict[str, Any]:
    """One request to the running fabric's control socket."""
    state = read_state(name)
    if state is None:
        raise FabricCliError(f"no fabric named {name!r} is running (start one with `starpulse fabric up`)")
    try:
        with connect(state["socket"], timeout_s) as s:
            stream = JsonLineStream(s)
            stream.send(req)
            reply = stream.recv()
    except EOFError:
        raise FabricCliError(f"fabric {name!r} closed the connection without answering") from None
    except OSError as exc:
        raise FabricCliError(f"fabric {name!r} (pid {state['pid']}) does not answer: {exc}") from None
    if not reply.get("ok"):
        raise FabricCliError(reply.get("error", "request failed"))
    return reply


# --- the daemon ----------------------------------------------------------------------------------------------
def summary_line(fab: Any) -> str:
    """The one line that describes a fabric as it comes up."""
    s = fab.spec
    return (f"{s.servers} servers x {s.rails} rails, {s.pods} pod(s), {len(fab.topo.leaves)} leaves, "
            f"{s.spines} spines, {len(fab.topo.nics)} NICs, links {s.link_rate_bps / 1e6:g} Mb/s, MTU {s.mtu}, "
            f"backend {fab.backend}")


def run_fabric(fab: Any, name: str, d: Path, *, shell: bool = False) -> int:
    """The fabric daemon: bring ``fab`` up, serve its control socket in ``d`` (and, with ``shell``, the
    interactive CLI) until ``fabric down`` or a signal, then tear everything down."""
    d.mkdir(parents=True, exist_ok=True)
    fab.owned["state_dir"] = str(d)   # killed before it writes its state: the next run removes the directory
    stop = {"flag": False}

    def on_signal(signum: int, _frame: object) -> None:
        stop["flag"] = True
        if signum == signal.SIGINT and not shell:
            raise KeyboardInterrupt
        if stop.get("shell"):   # wakes the CLI at its prompt; it sees the flag and returns
            raise KeyboardInterrupt

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    sock_path = d / "fabric.sock"
    server: socket.socket | None = None
    try:
        fab.up()
        print(f"fabric {name!r} up in {fab.timings.up_s:.1f} s: {summary_line(fab)}", flush=True)
        for nic in fab.topo.nics[:8]:
            print(f"  {nic.server} {nic.ifname} {nic.ip} -> {nic.leaf} port {nic.leaf_port}")
        if len(fab.topo.nics) > 8:
            print(f"  ... {len(fab.topo.nics) - 8} more NICs (addresses 10.<pod>.<rail>.<slot+1>)")
        server = open_control(d, fab)
        if shell:
            from emu.fabric_shell import FabricShell

            lock = threading.RLock()   # the CLI's commands vs faults from other shells
            serving = threading.Thread(target=serve, args=(server, fab, stop, lock), daemon=True)
            stop["shell"] = True
            serving.start()            # status/fault/down from other shells (starpulse run/bench too)
            try:
                FabricShell(fab, name=name, lock=lock, stop_requested=lambda: stop["flag"],
                            on_fault=lambda: write_state(d, fab, sock_path))
            finally:
                stop["shell"] = False
                stop["flag"] = True
                serving.join(timeout=30)
        else:
            suffix = "" if name == DEFAULT_NAME else f" --name {name}"
            print(f"running; `starpulse fabric status|fault|down{suffix}` from another shell", flush=True)
            serve(server, fab, stop)
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.close()
        fab.down()
        remove_state(name)
        for sig, handler in old.items():
            signal.signal(sig, handler)
        print(f"fabric {name!r} down in {fab.timings.down_s:.1f} s", flush=True)
    return 0


def open_control(d: Path, fab: Any) -> socket.socket:
    """Bind the fabric's control socket in its state directory ``d`` and write its state.json, so other
    processes (``fabric status|fault|down``, ``starpulse run|bench --name``) reach it; serve with ``serve``."""
    sock_path = d / "fabric.sock"
    with contextlib.suppress(OSError):
        sock_path.unlink()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind(str(sock_path))
        server.listen(8)
        server.settimeout(SERVE_POLL_S)
        write_state(d, fab, sock_path)
    except BaseException:
        server.close()
        raise
    return server


def write_state(d: Path, fab: Any, sock_path: Path) -> None:
    """state.json: how other processes reach this fabric, and exactly which processes it runs."""
    from emu.net import tracked_processes

    tmp = d / f"state.json.tmp{os.getpid()}"
    tmp.write_text(json.dumps({
        "pid": os.getpid(), "socket": str(sock_path), "workdir": str(fab.workdir),
        "topology": fab.status()["topology"], "backend": fab.backend,
        "switch_ctl": {n: sw.ctl for n, sw in fab.net.switches.items()},
        "processes": tracked_processes(fab.net), "node_pids": fab.net.node_pids(),
        "pfc": {"enabled": fab.pfc.enabled, "priority": fab.spec.pfc_priority},
        "fault_log": str(fab.faults.log_path), "time_dilation": fab.clock.dilation,
        "up_s": fab.timings.up_s}, indent=2))
    tmp.replace(d / "state.json")


def serve(server: socket.socket, fab: Any, stop: dict[str, bool], fault_lock: Any = None) -> None:
    """Answer status/fault/down requests, one connection at a time, until ``down`` or a signal; faults take
    ``fault_lock`` (the CLI's: a fault and a CLI command never drive a node's shell at once)."""
    while not stop["flag"]:
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        except InterruptedError:
            continue
        with conn:
            conn.settimeout(10.0)
            stream = JsonLineStream(conn, MAX_REQUEST_BYTES)
            try:
                req = stream.recv()
                with fault_lock if fault_lock and req.get("op") in ("fault", "script") else contextlib.nullcontext():
                    reply = handle_request(fab, req, stop)
                    if reply.get("events"):   # a switch may have restarted: record its new process
                        write_state(Path(server.getsockname()).parent, fab, Path(server.getsockname()))
            except (OSError, EOFError, ValueError) as exc:   # ValueError: bad JSON, a line too long
                reply = {"ok": False, "error": f"bad request: {exc}"}
            with contextlib.suppress(OSError):
                stream.send(reply)
        if stop["flag"] and stop.get("shell"):   # `fabric down` while the CLI runs: wake it at its prompt
            os.kill(os.getpid(), signal.SIGTERM)


def handle_request(fab: Any, req: dict[str, Any], stop: dict[str, bool]) -> dict[str, Any]:
    from dataclasses import asdict

    op = req.get("op")
    try:
        if op == "status":
            return {"ok": True, "status": fab.status()}
        if op == "down":
            stop["flag"] = True
            return {"ok": True}
        if op == "fault":
            event = fab.faults.apply(req["action"], req["target"], req.get("value"))
            return {"ok": True, "events": [asdict(event)]}
        if op == "script":
            return {"ok": True, "events": [asdict(e) for e in fab.faults.run_script(req["text"])]}
    except Exception as exc:  # report to the client, keep the fabric running
        return {"ok": False, "error": str(exc)}
    return {"ok": False, "error": f"unknown op {op!r}: expected status, fault, script or down"}
