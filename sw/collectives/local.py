"""Run a function on every rank of a servers x GPUs job on this machine (forked processes, a temporary store):
shared memory inside each emulated server, TCP on loopback between servers.  Tests and single-box use."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sw.clock.lag import write_lag_file

from .bootstrap import init_communicator, job_digest
from .comm import Communicator
from .config import CommConfig
from .deadline import Deadline
from .errors import CollectiveUserError
from .transport.shm import SHM_DIR

RANKS_PER_CPU = 16
RANK_MEMORY_BYTES = 128 << 20   # what one forked rank may come to hold (interpreter, numpy, buffers)


def max_local_ranks() -> int:
    """How many ranks this machine may fork: 16 per CPU, and one per 128 MiB of available memory."""
    try:
        avail = int(next(ln.split()[1] for ln in open("/proc/meminfo") if ln.startswith("MemAvailable:"))) * 1024
    except (OSError, StopIteration, ValueError, IndexError):
        avail = RANKS_PER_CPU * (os.cpu_count() or 1) * RANK_MEMORY_BYTES
    return max(1, min(RANKS_PER_CPU * (os.cpu_count() or 1), avail // RANK_MEMORY_BYTES))


def check_local_ranks(world: int, flags: str) -> None:
    """Refuse more local ranks than the machine can hold (each is a process), explaining the limit."""
    cap = max_local_ranks()
    if world > cap:
        raise CollectiveUserError(
            f"{flags} = {world} local ranks: at most {cap} on this machine (every rank is a process: "
            f"{RANKS_PER_CPU} per CPU x {os.cpu_count()} CPUs, and {RANK_MEMORY_BYTES >> 20} MiB of available memory "
            "each)")


class RankFailure(RuntimeError):
    """One or more ranks raised (their error lines are in the message) or did not finish in time;
    ``results`` holds what the ranks that did finish returned."""

    is_user_error = False

    def __init__(self, message: str, results: dict[int, Any] | None = None) -> None:
        super().__init__(message)
        self.results = results or {}


def _rank_main(fn: Callable[..., Any], args: tuple[Any, ...], rank: int, world: int, store: str, server: int,
               local_rank: int, config: CommConfig, env: dict[str, str], results: Any) -> None:
    comm: Communicator | None = None
    try:
        comm = init_communicator(rank, world, store, server=server, local_rank=local_rank, config=config, env=env)
        value = fn(comm, *args)
        write_lag_file()          # a forked rank skips atexit: its throttles' lag reaches $STARPULSE_LAG_DIR now
        results.put((rank, True, value))
    except BaseException as exc:  # reported to the parent
        results.put((rank, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}"))
    finally:
        if comm is not None:
            comm.close()


def run_local(servers: int, gpus: int | Sequence[int], fn: Callable[..., Any], *args: Any,
              config: CommConfig | None = None, env: dict[str, str] | None = None, timeout_s: float = 60.0
              ) -> list[Any]:
    """``fn(comm, *args)`` on every rank, numbered server-major; their results in rank order.

    ``gpus`` is the GPU count of every server, or one count per server (uneven servers)."""
    per_server = [gpus] * servers if isinstance(gpus, int) else list(gpus)
    if len(per_server) != servers or min(per_server, default=0) < 1:
        raise ValueError(f"gpus {gpus!r}: need one count >= 1 for each of {servers} servers")
    placement = [(s, g) for s, count in enumerate(per_server) for g in range(count)]
    check_local_ranks(len(placement), f"{servers} servers x {gpus} GPUs")
    config = replace(config or CommConfig(), timeout_s=min((config or CommConfig()).timeout_s, timeout_s))
    ctx = mp.get_context("fork")
    store = tempfile.mkdtemp(prefix="spcoll-store-")
    results = ctx.Queue()
    world = len(placement)
    procs = [ctx.Process(target=_rank_main, name=f"rank{r}",
                         args=(fn, args, r, world, store, s, g, config, env or {}, results))
             for r, (s, g) in enumerate(placement)]
    got: dict[int, tuple[bool, Any]] = {}
    try:
        for p in procs:
            p.start()
        deadline = Deadline(timeout_s)
        while len(got) < world and not deadline.expired():
            try:
                rank, ok, value = results.get(timeout=min(1.0, max(0.05, deadline.remaining_s())))
            except Exception:  # queue.Empty: look at the clock and the processes again
                if all(not p.is_alive() for p in procs) and results.empty():
                    break
                continue
            got[rank] = (ok, value)
    finally:
        for p in procs:
            p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2.0)
        results.close()
        shutil.rmtree(store, ignore_errors=True)
        for leftover in SHM_DIR.glob(f"spcoll-{job_digest(store)}-*"):  # only if a rank died during set-up
            leftover.unlink(missing_ok=True)
    errors = [f"rank {r}: {v}" for r, (ok, v) in sorted(got.items()) if not ok]
    missing = [r for r in range(world) if r not in got]
    if missing:
        errors.append(f"ranks {missing} did not report within {timeout_s:g} s")
    if errors:
        raise RankFailure("\n".join(errors), {r: v for r, (ok, v) in got.items() if ok})
    return [got[r][1] for r in range(world)]

