"""Start one process per GPU rank inside its server's network namespace of a fabric (torchrun-style env), follow
their logs, collect exit codes, and stop every one of them on failure, timeout or Ctrl-C.

Rank r = server s x GPUs + GPU g runs in server ``s<s>``'s namespace (entered with ``mnexec -a PID``) with
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, STARPULSE_STORE (a fresh shared directory),
STARPULSE_NIC_ADDR (NIC ``s<s>-eth<g>`` on rail g) and STARPULSE_SERVER, plus what the fabric dictates
(``fabric_env``): the host link rate its NIC paces at (STARPULSE_INTER_RATE), the rate of its shared-memory "NVLink"
(STARPULSE_INTRA_RATE: ``DEFAULT_INTRA_RATIO`` x the link rate unless given), the time dilation the switches run
with (STARPULSE_TIME_DILATION) and the inter-server transport (STARPULSE_NET, RoCE unless asked otherwise); its
stdout+stderr go to ``<logdir>/rank<r>.log``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from emu.reap import owned_tempdir
from sw.clock import ENV_DILATION, Clock, get_clock
from sw.clock.lag import ENV_LINK_MTU
from sw.collectives.config import (
    ENV_INTER_RATE,
    ENV_INTRA_RATE,
    ENV_NET,
    ENV_ROCE_BASE_RTT,
    ENV_ROCE_CC,
    ROCE_CCS,
    CommConfig,
    intra_rate_for,
)
from sw.collectives.fabric_topology import Topology, TopologySpec
from sw.roce.softnic.pfc import nic_pfc_env

REPO_ROOT = str(Path(__file__).resolve().parents[1])
POLL_NS = 50_000_000
STOP_GRACE_NS = 3_000_000_000
EXIT_TIMEOUT = 124
"""Exit code of ranks stopped because the job ran past its timeout (as coreutils ``timeout``)."""
NETS = ("roce", "tcp")
DEFAULT_NET = "roce"
"""Inter-server transport of ranks on a fabric: its NICs are RoCE NICs (TCP: $STARPULSE_NET=tcp or --net tcp)."""
LOOPBACK_ADDR = "127.0.0.1"


class LaunchError(RuntimeError):
    """The job cannot be started as asked (no namespace for a server, a bad command); one clear line."""

    is_user_error = True


@dataclass(frozen=True)
class RankPlan:
    """Where one rank runs and what it is told: its numbers, server, namespace and NIC address."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    server_index: int
    server: str
    nic_addr: str
    nic_ifname: str


@dataclass
class RankResult:
    """How one rank ended: exit code (128+N for signal N), whether we stopped it, and its log file."""

    rank: int
    server: str
    returncode: int
    stopped_by_launcher: bool
    log_path: Path


@dataclass
class JobResult:
    """Every rank's result; ``exit_code`` is the worst code among ranks that ended on their own."""

    ranks: list[RankResult]
    timed_out: bool = False

    @property
    def exit_code(self) -> int:
        own = [r.returncode for r in self.ranks if not r.stopped_by_launcher and r.returncode != 0]
        if own:
            return max(own)
        if self.timed_out:
            return EXIT_TIMEOUT
        return max((r.returncode for r in self.ranks), default=0)

    @property
    def failed_ranks(self) -> list[int]:
        return [r.rank for r in self.ranks if r.returncode != 0 and not r.stopped_by_launcher]


def rank_plan(topo: Topology) -> list[RankPlan]:
    """One rank per NIC, numbered server-major (rank = server index x GPUs + GPU)."""
    gpus = topo.spec.gpus_per_server
    world = topo.spec.servers * gpus
    out = []
    for s, server in enumerate(topo.servers):
        for nic in topo.nics_of(server):
            out.append(RankPlan(rank=s * gpus + nic.rail, world_size=world, local_rank=nic.rail,
                                local_world_size=gpus, server_index=s, server=server, nic_addr=nic.ip,
                                nic_ifname=nic.ifname))
    return sorted(out, key=lambda p: p.rank)


def local_plan(topo: Topology) -> list[RankPlan]:
    """``rank_plan`` for ranks on this box without a fabric (``launch`` with no namespaces): every rank's NIC
    address is the loopback, so ranks of different servers meet over loopback TCP."""
    return [dataclasses.replace(p, nic_addr=LOOPBACK_ADDR, nic_ifname="lo") for p in rank_plan(topo)]


def fabric_env(spec: TopologySpec, dilation: float, net: str | None = None,
               base: dict[str, str] | None = None, intra_rate: str | None = None,
               roce_cc: str | None = None) -> dict[str, str]:
    """What every rank must share with the fabric: its NIC's line rate (the host link rate, so a RoCE NIC paces at
    the fabric's rate and not at the veth's 10 Gb/s), its NVLink stand-in's rate (``intra_rate``: '900M', '9x'
    of the link rate or 'off'; else ``base``'s $STARPULSE_INTRA_RATE, else ``DEFAULT_INTRA_RATIO`` x the link
    rate), the switches' time dilation, the transport (``net``, else ``base``'s $STARPULSE_NET, else RoCE), the
    RoCE QPs' congestion control (``roce_cc``, else ``base``'s $STARPULSE_ROCE_CC, else the communicator's
    default), the fabric's base round trip (``TopologySpec.base_rtt_ns``: HPCC's T covers it) and its MTU (the
    lateness bound's frame, ``sw.clock.lag.link_mtu``).
    A rate already set in ``base`` is kept (pacing below line rate)."""
    base = dict(os.environ if base is None else base)
    chosen = net or base.get(ENV_NET, "").strip().lower() or DEFAULT_NET
    if chosen not in NETS:
        where = "--net" if net else f"${ENV_NET}="
        raise LaunchError(f"{where}{chosen!r}: expected one of {', '.join(NETS)}")
    cc = roce_cc_choice(roce_cc, base)
    given, what = (intra_rate, "--intra-rate") if intra_rate else (base.get(ENV_INTRA_RATE), f"${ENV_INTRA_RATE}")
    intra_bps = intra_rate_for(given, spec.link_rate_bps, what)
    # a PFC fabric's lossless class ($STARPULSE_NIC_PFC): the ranks' NICs honour (and send) its pauses
    return {ENV_INTER_RATE: base.get(ENV_INTER_RATE) or str(int(spec.link_rate_bps)),
            ENV_INTRA_RATE: "off" if intra_bps is None else str(int(intra_bps)),
            ENV_DILATION: repr(float(dilation)), ENV_NET: chosen, **({ENV_ROCE_CC: cc} if cc else {}),
            ENV_ROCE_BASE_RTT: str(spec.base_rtt_ns()), ENV_LINK_MTU: str(spec.mtu),
            **nic_pfc_env(spec.pfc_priority, base)}


def roce_cc_choice(roce_cc: str | None, base: dict[str, str] | os._Environ[str]) -> str:
    """The RoCE congestion control asked for: ``roce_cc`` (the ``--roce-cc`` flag), else ``base``'s
    $STARPULSE_ROCE_CC, else '' (the communicator's default); a bad one is a ``LaunchError`` naming its source."""
    cc = (roce_cc or base.get(ENV_ROCE_CC, "")).strip().lower()
    if cc and cc not in ROCE_CCS:
        where = "--roce-cc " if roce_cc else f"${ENV_ROCE_CC}="
        raise LaunchError(f"{where}{cc!r}: expected one of {', '.join(ROCE_CCS)}")
    return cc


def roce_cc_of(shared: dict[str, str]) -> str | None:
    """The congestion control a ``fabric_env``'s ranks run on their RoCE QPs (None: their transport is TCP)."""
    if shared.get(ENV_NET) != "roce":
        return None
    return shared.get(ENV_ROCE_CC) or CommConfig.roce_cc


def rank_env(plan: RankPlan, store: str, base: dict[str, str] | None = None,
             fabric: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one rank: ``base`` (default: ours), the ``fabric_env`` and the launcher's contract."""
    env = dict(os.environ if base is None else base)
    env.update(fabric or {})
    path = env.get("PYTHONPATH", "")
    if REPO_ROOT not in path.split(os.pathsep):   # so `python -m sw.collectives` works from any directory
        env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + path if path else "")
    env.update({
        "RANK": str(plan.rank), "WORLD_SIZE": str(plan.world_size), "LOCAL_RANK": str(plan.local_rank),
        "LOCAL_WORLD_SIZE": str(plan.local_world_size), "GROUP_RANK": str(plan.server_index),
        "STARPULSE_STORE": store, "STARPULSE_NIC_ADDR": plan.nic_addr,
        "STARPULSE_SERVER": str(plan.server_index), "PYTHONUNBUFFERED": "1",
    })
    return env


def resolve_command(cmd: list[str]) -> list[str]:
    """``python``/``python3`` become this interpreter (the project's venv), as ranks must import ``sw``."""
    if not cmd:
        raise LaunchError("no command to launch: give one after '--', e.g. -- python -m sw.collectives")
    if cmd[0] in ("python", "python3"):
        return [sys.executable, *cmd[1:]]
    if shutil.which(cmd[0]) is None and not Path(cmd[0]).exists():
        raise LaunchError(f"command {cmd[0]!r}: not found on PATH")
    return list(cmd)


def namespace_pids_from_state(state: dict[str, Any], servers: list[str]) -> dict[str, int]:
    """Server -> PID of its Mininet shell, for a fabric run by another process (``starpulse fabric up``).

    Adapter over emu.cli's state file, which records the fabric's processes but not their names: a Mininet
    node shell's command line ends with ``mininet:<name>``."""
    by_name: dict[str, int] = {}
    for pid, _start in state.get("processes", []):
        try:
            argv = Path(f"/proc/{int(pid)}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for arg in argv:
            if arg.startswith(b"mininet:"):
                by_name[arg[len(b"mininet:"):].decode()] = int(pid)
    missing = [s for s in servers if s not in by_name]
    if missing:
        raise LaunchError(f"the running fabric has no live namespace for server(s) {', '.join(missing)}")
    return {s: by_name[s] for s in servers}


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM/SIGHUP raise KeyboardInterrupt while inside, so a killed launcher still stops its ranks and
    tears down its fabric (the ``finally`` blocks run) instead of leaving them behind."""
    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    old = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def set_tcp_ecn(ns_pids: dict[str, int], value: int = 1) -> None:
    """``net.ipv4.tcp_ecn`` (per network namespace) in each server's namespace."""
    for server, pid in ns_pids.items():
        done = subprocess.run(["mnexec", "-a", str(pid), "sysctl", "-qw", f"net.ipv4.tcp_ecn={value}"],
                              capture_output=True, text=True, timeout=10)
        if done.returncode != 0:
            raise LaunchError(f"server {server}: cannot set net.ipv4.tcp_ecn: {done.stderr.strip()}")


class _Rank:
    """A started rank: its process (its own session, so we can signal the whole group) and log follower."""

    def __init__(self, plan: RankPlan, proc: subprocess.Popen, log_path: Path) -> None:
        self.plan = plan
        self.proc = proc
        self.log_path = log_path
        self.stopped = False
        self._log: IO[bytes] | None = None
        self._partial = b""

    def follow(self, echo: Callable[[str], None] | None, flush: bool = False) -> None:
        """Hand new complete log lines (all remaining ones when ``flush``) to ``echo`` with a rank prefix."""
        if echo is None:
            return
        if self._log is None:
            try:
                self._log = open(self.log_path, "rb")  # kept open while following
            except OSError:
                return
        data = self._partial + self._log.read()
        lines = data.split(b"\n")
        self._partial = b"" if flush else lines.pop()
        for line in lines:
            if line or not flush:
                echo(f"[rank {self.plan.rank}] {line.decode(errors='replace')}")

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _returncode(proc: subprocess.Popen) -> int:
    code = proc.returncode
    return 128 - code if code is not None and code < 0 else int(code or 0)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)   # the rank's own session (start_new_session): only its processes


def launch(topo: Topology, ns_pids: dict[str, int] | None, cmd: list[str], *, logdir: Path,
           env: dict[str, str] | None = None, timeout_s: float | None = None,
           echo: Callable[[str], None] | None = None, clock: Clock | None = None, tcp_ecn: bool = True,
           net: str | None = None, intra_rate: str | None = None, stop: threading.Event | None = None,
           roce_cc: str | None = None) -> JobResult:
    """Run ``cmd`` as every rank of ``topo`` in its server's namespace; return when all ended.  ``ns_pids``
    None: every rank runs on this box, in our namespace, with TCP between servers (``local_plan``; no root).

    Ranks get the ``fabric_env`` of ``topo`` and ``clock`` (line rate, ``intra_rate``, dilation, transport ``net``,
    its congestion control ``roce_cc``).

    ``tcp_ecn`` turns on ECN for the ranks' TCP (``net.ipv4.tcp_ecn=1`` in each server namespace), so the
    switches' RED marking slows senders down before the queues overflow.

    ``stop``: once set (by another thread), every rank is stopped as after a timeout, without it counting as one.

    The first rank to fail (or the timeout, or Ctrl-C) stops the others: SIGTERM to each rank's process group,
    SIGKILL after a grace period.  No process outlives this call; the store directory is removed."""
    clock = clock or get_clock()
    argv = resolve_command(cmd)
    if ns_pids is None and net == "roce":
        raise LaunchError("--net roce needs a fabric's NICs: drop --local (or use --net tcp)")
    shared = fabric_env(topo.spec, clock.dilation, "tcp" if ns_pids is None else net, env, intra_rate, roce_cc)
    plans = rank_plan(topo) if ns_pids is not None else local_plan(topo)
    if ns_pids is not None:
        missing = [p.server for p in plans if p.server not in ns_pids]
        if missing:
            raise LaunchError(f"no namespace for server(s) {', '.join(sorted(set(missing)))}")
    logdir.mkdir(parents=True, exist_ok=True)
    if tcp_ecn and ns_pids is not None:
        set_tcp_ecn({p.server: ns_pids[p.server] for p in plans})
    store = str(owned_tempdir("starpulse-store-"))
    ranks: list[_Rank] = []
    timed_out = False
    try:
        for plan in plans:
            log_path = logdir / f"rank{plan.rank}.log"
            with open(log_path, "wb") as log:
                enter = [] if ns_pids is None else ["mnexec", "-a", str(ns_pids[plan.server])]
                proc = subprocess.Popen([*enter, *argv], stdin=subprocess.DEVNULL,
                                        stdout=log, stderr=subprocess.STDOUT, env=rank_env(plan, store, env, shared),
                                        start_new_session=True)
            ranks.append(_Rank(plan, proc, log_path))
        deadline_ns = None if timeout_s is None else clock.now_ns() + int(timeout_s * 1e9 / clock.dilation)
        while True:
            for r in ranks:
                r.follow(echo)
            running = [r for r in ranks if r.proc.poll() is None]
            if not running:
                break
            failed = any(r.proc.returncode not in (None, 0) and not r.stopped for r in ranks)
            if deadline_ns is not None and clock.now_ns() > deadline_ns:
                timed_out = True
                if echo is not None:
                    echo(f"launch: timeout after {timeout_s:g} s; stopping {len(running)} rank(s)")
                failed = True
            if stop is not None and stop.is_set():
                failed = True
            if failed:
                _stop(running, clock)
                break
            clock.sleep_ns(POLL_NS / clock.dilation)
    except BaseException:
        _stop([r for r in ranks if r.proc.poll() is None], clock)
        raise
    finally:
        for r in ranks:
            if r.proc.poll() is None:   # only if _stop itself was interrupted
                _signal_group(r.proc, signal.SIGKILL)
                r.proc.wait()
            r.follow(echo, flush=True)
            r.close()
        shutil.rmtree(store, ignore_errors=True)
    return JobResult([RankResult(r.plan.rank, r.plan.server, _returncode(r.proc), r.stopped, r.log_path)
                      for r in ranks], timed_out)


def _stop(ranks: list[_Rank], clock: Clock) -> None:
    """SIGTERM each rank's group, wait a grace period, then SIGKILL what is left; reap all."""
    for r in ranks:
        r.stopped = True
        _signal_group(r.proc, signal.SIGTERM)
    deadline_ns = clock.now_ns() + STOP_GRACE_NS / clock.dilation
    while any(r.proc.poll() is None for r in ranks) and clock.now_ns() < deadline_ns:
        clock.sleep_ns(POLL_NS / clock.dilation)
    for r in ranks:
        if r.proc.poll() is None:
            _signal_group(r.proc, signal.SIGKILL)
        r.proc.wait()
