"""Adapter from the switch process to the compiled pipeline (``p4.pipeline``) and its command language.

The pipeline's ``ingress``/``egress`` stages are used as they are; this module only routes their results
into the switch's traffic manager (copies, E2E clones, recirculation), hands queue metadata to egress, and
keeps the traffic manager in step with ``set_queue_depth``/``set_queue_rate`` run by ``p4.runtime_cli``.
Loading goes through a parse-tree cache keyed by the preprocessed source's hash, so a switch starts fast.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from p4.errors import CommandError, P4Error
from p4.switch.tm import QueuedPacket, TrafficManagerError
from sw.clock import Clock, get_clock
from sw.units import UnitError, parse_rate_bps

if TYPE_CHECKING:
    from p4.pipeline import Pipeline
    from p4.switch.switch import EmbeddedSwitch
    from p4.switch.tm import TrafficManager

CACHE_ENV = "STARPULSE_CACHE_DIR"
SWITCH_COMMANDS = {
    "port_stats": "port_stats [EGRESS_PORT]  (rx/tx/drop counters, queue depth, high-water mark and the time-weighted "
                  "depth p50/p99 per port)",
    "port_stats_reset": "port_stats_reset  (zero the port counters; high-water marks restart from now)",
    "set_port_rate": "set_port_rate EGRESS_PORT RATE [OVERHEAD_BYTES]  (shape a port to a line rate in bit/s, "
                     "e.g. 100M, counting each frame plus OVERHEAD_BYTES, 24 for Ethernet's preamble/FCS/gap; "
                     "'off' removes it)",
}
_COMPILER_FILES = ("parse.py", "p4.lark", "preprocess.py", "program.py", "pipeline.py")


def cache_dir() -> Path:
    """Where compiled-program artefacts live: $STARPULSE_CACHE_DIR, else ~/.cache/starpulse/p4."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env) / "p4"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "starpulse" / "p4"


def _compiler_fingerprint() -> str:
    """Changes whenever the front end changes, so stale cached parse trees are never used."""
    h = hashlib.sha256()
    base = Path(__file__).resolve().parents[1]     # our p4/ (``import p4`` may be the PyPI p4runtime's package)
    for name in _COMPILER_FILES:
        p = base / name
        if p.exists():
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def compile_cached(path: str | Path, *, seed: int = 0, include_dirs: list[Path] | None = None,
                   defines: dict[str, str] | None = None) -> Any:
    """Compile ``path`` like ``p4.compiler.compile_file``, reusing a cached parse tree for identical source."""
    from lark import Tree

    from p4.compiler import compile_preprocessed
    from p4.parse import parse
    from p4.preprocess import preprocess

    if not Path(path).is_file():
        raise P4Error(f"{path}: no such file")
    pre = preprocess(path, include_dirs, defines)
    key = hashlib.sha256((_compiler_fingerprint() + "\0" + pre.text).encode()).hexdigest()
    entry = cache_dir() / f"{key}.tree.pickle"
    tree = None
    try:
        tree = pickle.loads(entry.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError, TypeError):
        tree = None
    if not isinstance(tree, Tree):
        tree = None
    if tree is None:
        tree = parse(pre)                    # raises CompileError with file:line:col for bad programs
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            tmp = entry.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(pickle.dumps(tree, protocol=pickle.HIGHEST_PROTOCOL))
            tmp.replace(entry)
        except OSError:
            pass                             # a read-only home only costs start-up time
    return compile_preprocessed(pre, Path(path).stem, seed, tree=tree)


class SwitchPipeline:
    """The compiled program as the switch uses it: stages feeding a traffic manager, plus the command language."""

    def __init__(self, pipeline: Pipeline) -> None:
        from p4.runtime_cli import COMMANDS_HELP, RuntimeCLI

        self.pipe = pipeline
        self.cli = RuntimeCLI(pipeline)
        self._commands_help = COMMANDS_HELP
        self.tm: TrafficManager | None = None
        self.switch: EmbeddedSwitch | None = None
        self._digests: list[dict[str, Any]] = []
        self._ingress_port_slot = pipeline.program.sm["ingress_port"]
        # every digest the pipeline makes (ingress, resubmit, recirculation, the batched path) passes here
        pipeline.digests = _DigestTap(self._take_one, pipeline.digests.maxlen)
        self._drops = pipeline.drops
        self._batch = getattr(pipeline, "process_batch", None)

    def attach_traffic_manager(self, tm: TrafficManager, switch: EmbeddedSwitch) -> None:
        self.tm = tm
        self.switch = switch
        self._sync_queues()

    def _attached(self) -> tuple[EmbeddedSwitch, TrafficManager]:
        if self.switch is None or self.tm is None:
            raise P4Error("the pipeline is not attached to a switch (attach_traffic_manager)")
        return self.switch, self.tm

    # --- data path -------------------------------------------------------------------------------------------
    def ingress(self, port: int, frame: bytes) -> Any:
        """Run ingress: ``.queued`` are the copies to queue (egress_port, priority, length_bytes), ``.dropped``
        the reason when the original packet was dropped."""
        return self.pipe.ingress(port, frame)

    def ingress_batch(self, port: int, frames: list[bytes]) -> Any:
        """``Pipeline.ingress_batch``: lazily per frame ``[packet]``/``[]`` (dropped) or an IngressResult."""
        return self.pipe.ingress_batch(port, frames)

    def drop_total(self) -> int:
        """Packets the program dropped so far (ingress and egress; not the clone-to-no-session notes)."""
        return sum(n for reason, n in self._drops.items() if not reason.startswith("clone to"))

    def process_batch(self, port: int, frames: list[bytes],
                      priorities: list[int] | None = None) -> list[tuple[int, bytes]] | None:
        """Ingress -> egress -> deparser for frames of one port with empty, unshaped queues (None: no batch
        mode in this pipeline); equal to running each frame through ``ingress``/``egress`` cut-through.
        ``priorities`` (when given) gets each output's ``standard_metadata.priority``, the queue it passed."""
        if self._batch is None:
            return None
        if priorities is None or self.pipe.program.sm.get("priority") is None:
            return self._batch([(port, f) for f in frames])
        return self._batch([(port, f) for f in frames], priorities)

    def egress(self, tp: QueuedPacket, now_ns: int) -> list[tuple[int, bytes]]:
        """Run egress on a dequeued packet with its real queue metadata; returns frames to transmit."""
        qp = tp.item
        res = self.pipe.egress(qp, enq_qdepth=tp.enq_qdepth_pkts, deq_qdepth=tp.deq_qdepth_pkts,
                               deq_timedelta_us=tp.deq_timedelta_ns // 1000,
                               enq_timestamp_us=tp.enq_timestamp_ns // 1000)
        self._after_egress(qp, res, now_ns)
        return res.out

    def egress_batch(self, tps: list[QueuedPacket], now_ns: int,
                     transmit: Callable[[int, bytes, int], None]) -> None:
        """``egress`` for dequeued packets in order, frames handed to ``transmit(port, frame, now_ns)`` as they
        are made; the same results as ``egress`` per packet (``Pipeline.egress_batch`` stops at clones and
        recirculations so they are handled before later packets run egress)."""
        egress_batch = self.pipe.egress_batch
        switch = self._attached()[0]
        start, n = 0, len(tps)
        while start < n:
            chunk = tps[start:] if start else tps
            results = egress_batch([tp.item for tp in chunk],
                                   [(tp.enq_qdepth_pkts, tp.deq_qdepth_pkts,
                                     (tp.deq_timestamp_ns - tp.enq_timestamp_ns) // 1000, tp.enq_timestamp_ns // 1000)
                                    for tp in chunk])
            for tp, r in zip(chunk, results, strict=False):   # results stop early at a clone/recirculation
                if type(r) is tuple:
                    transmit(r[0], r[1], now_ns)
                    continue
                if r.error is not None:
                    switch._pipeline_failed(tp.egress_port, 1, "egress", r.error)
                    continue
                try:
                    self._after_egress(tp.item, r, now_ns)
                except Exception as exc:  # as the per-packet path: count, log, go on
                    switch._pipeline_failed(tp.egress_port, 1, "egress", exc)
                    continue
                for port, frame in r.out:
                    transmit(port, frame, now_ns)
            start += len(results)

    def _after_egress(self, qp: Any, res: Any, now_ns: int) -> None:
        """An egress drop is counted at the packet's ingress port; E2E clones and recirculations re-enter."""
        if not (res.dropped is not None or res.queued or res.recirculate):
            return
        switch = self._attached()[0]
        if res.dropped is not None:
            switch._drop(qp.S[self._ingress_port_slot]).pipeline_drop_pkts += 1
        if res.queued or res.recirculate:
            enqueue = switch.enqueue
            for clone in res.queued:                       # E2E clones go back through the queues
                enqueue(clone.egress_port, clone, clone.length_bytes, now_ns, clone.priority)
            for rframe, keep in res.recirculate:
                again = self.pipe.recirculate(qp.S[self._ingress_port_slot], rframe, keep, qp.loops)
                for c in again.queued:
                    enqueue(c.egress_port, c, c.length_bytes, now_ns, c.priority)

    def _take_one(self, d: Any) -> None:
        self._digests.append({"receiver": d.receiver, "name": d.name, "fields": d.fields})

    def has_digests(self) -> bool:
        return bool(self._digests)

    def take_digests(self) -> list[dict[str, Any]]:
        out, self._digests = self._digests, []
        return out

    # --- control ---------------------------------------------------------------------------------------------
    def execute(self, line: str) -> str:
        """A simple_switch_CLI command (via ``p4.runtime_cli``) or one of this switch's own commands."""
        words = line.split()
        if words and words[0] == "set_port_rate":
            return self._set_port_rate(words[1:])
        if words and words[0] == "help" and len(words) == 1:
            return self.cli.execute(line) + "\n" + "\n".join(SWITCH_COMMANDS.values())
        if words and words[0] in ("set_queue_depth", "set_queue_rate"):
            before = self._queue_settings()
            out = self.cli.execute(line)
            self._sync_queues(before)
            return out
        return self.cli.execute(line)

    def _queue_settings(self) -> list[dict]:
        p = self.pipe
        return [dict(p.queue_depth_pkts), dict(p.queue_rate_pps),
                dict(getattr(p, "queue_depth_pkts_prio", {})), dict(getattr(p, "queue_rate_pps_prio", {}))]

    def _sync_queues(self, before: list[dict] | None = None) -> None:
        """Apply queue settings the command language recorded on the pipeline to the traffic manager
        (BMv2: a rate of 0 packets/s means unlimited); a setting the TM refuses is undone and reported."""
        tm = self.tm
        if tm is None:
            return
        p = self.pipe

        def rate(v: float) -> float | None:
            return None if v == 0 else v

        stores = [
            (p.queue_depth_pkts, lambda k, v: tm.set_queue_depth(int(v), k)),
            (p.queue_rate_pps, lambda k, v: tm.set_queue_rate(rate(v), k)),
            (getattr(p, "queue_depth_pkts_prio", {}), lambda k, v: tm.set_queue_depth(int(v), k[0], k[1])),
            (getattr(p, "queue_rate_pps_prio", {}), lambda k, v: tm.set_queue_rate(rate(v), k[0], k[1])),
        ]
        old = before or [{} for _ in stores]
        for (store, apply), prev in zip(stores, old, strict=True):
            for key in sorted(store, key=lambda k: (k is not None, str(k))):   # switch-wide settings first
                if key in prev and prev[key] == store[key]:
                    continue
                try:
                    apply(key, store[key])
                except TrafficManagerError as exc:
                    if key in prev:
                        store[key] = prev[key]
                    else:
                        del store[key]
                    raise CommandError(str(exc)) from None

    def _set_port_rate(self, args: list[str]) -> str:
        usage = f"set_port_rate {' '.join(args)!r}: usage: {SWITCH_COMMANDS['set_port_rate']}"
        if len(args) not in (2, 3) or not args[0].isdigit() or (len(args) == 3 and not args[2].isdigit()):
            raise CommandError(usage)
        port, tm = int(args[0]), self._attached()[1]
        if args[1] == "off":
            tm.set_port_rate_Bps(None, port)
            return ""
        try:
            rate_bps = parse_rate_bps(args[1], what="set_port_rate rate")
        except UnitError as exc:
            raise CommandError(str(exc)) from None
        overhead = int(args[2]) if len(args) == 3 else 0
        try:
            tm.set_port_rate_Bps(rate_bps / 8, port, overhead)
        except TrafficManagerError as exc:
            raise CommandError(str(exc)) from None
        return ""

    def complete(self, line: str) -> list[str]:
        """Tab-completion candidates: the command language's own, plus this switch's commands."""
        words = line.split()
        if len(words) <= 1 and not line.endswith(" "):
            prefix = words[0] if words else ""
            return sorted(c for c in self.command_names() if c.startswith(prefix))
        completions = getattr(self.cli, "completions", None)
        return completions(line) if completions is not None else []

    def command_names(self) -> list[str]:
        return sorted(set(self._commands_help) | set(SWITCH_COMMANDS))

    def describe(self) -> dict[str, list[str]]:
        """Command and object names for the shell's tab completion."""
        p = self.pipe
        names: set[str] = set()
        for group in (p.tables, p.actions, p.registers, p.counters, p.meters):
            names.update(group)
        return {"commands": self.command_names(), "names": sorted(names)}


class _DigestTap(deque):
    """The pipeline's digest history that also hands each new digest to the switch."""

    def __init__(self, on_digest: Any, maxlen: int | None) -> None:
        super().__init__(maxlen=maxlen)
        self._on_digest = on_digest

    def append(self, d: Any) -> None:
        super().append(d)
        self._on_digest(d)


def load_pipeline(path: str | Path, *, device_id: int = 0, clock: Clock | None = None,
                  include_dirs: list[Path] | None = None, defines: dict[str, str] | None = None) -> SwitchPipeline:
    """Compile (through the cache) and instantiate the program for a switch."""
    from p4.pipeline import Pipeline

    prog = compile_cached(path, include_dirs=include_dirs, defines=defines)
    return SwitchPipeline(Pipeline(prog, clock=clock or get_clock(), device_id=device_id))
