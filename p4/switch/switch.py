"""The switch process main loop: ports -> ingress -> traffic manager -> egress -> deparser -> ports.

One thread, one epoll loop: it sleeps until a frame arrives, a control request comes or the traffic manager's
next departure is due (converted to wall time through ``sw.clock``, so time dilation applies to the queues).
Digests and packets for the CPU port reach control-socket subscribers; per-port counters feed ``port_stats``.
"""

from __future__ import annotations

import selectors
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from p4.errors import CommandError, P4Error
from p4.switch.control import ControlServer
from p4.switch.pfc import PFC_COMMANDS, PfcManager
from p4.switch.pipeline_adapter import SwitchPipeline
from p4.switch.ports import SwitchPort
from p4.switch.switch_lag import LAG_COMMANDS, SwitchLag
from p4.switch.tm import QDEPTH_SCOPES, SCHEDULERS, TM_COMMANDS, TrafficManager
from p4.switch.trace import TRACE, frame_summary, make_logger
from sw.clock import Clock, get_clock
from sw.clock.lag import record_rx_batch
from sw.units.pcap_file import PcapWriter
from sw.units.pfc_frame import is_mac_control

RX_BATCH_FRAMES = 64
IDLE_WAKEUP_S = 0.2        # wall seconds between housekeeping passes (pcap flush, port liveness) when idle
PCAP_FLUSH_NS = 200_000_000
PORT_STATS_PFC = ("pfc_pauses_sent", "pfc_pauses_rx", "pfc_paused_ns", "pfc_xoff_events", "pfc_headroom_drop_pkts",
                  "pfc_watchdog_trips")   # the PFC totals port_stats shows (all of them: pfc_stats)


class SwitchSetupError(P4Error):
    """A switch option that cannot be honoured (unwritable pcap directory or log file)."""


@dataclass
class DropCounters:
    """Per-port packets the switch dropped outside the queues: by the program (ingress or egress, counted at
    the ingress port) and for an egress port without an interface (full queues are the TM's count)."""

    pipeline_drop_pkts: int = 0
    no_port_drop_pkts: int = 0
    pipeline_error_pkts: int = 0     # the pipeline raised (a target bug): logged, packet dropped, switch goes on
    mac_control_pkts: int = 0        # MAC control frames (PFC) consumed here: honoured if PFC is on, never forwarded


@dataclass
class SwitchConfig:
    """Everything ``starpulse p4 switch`` accepts, after validation."""

    interfaces: list[tuple[int, str]]
    device_id: int = 0
    ctl: str | None = None
    pcap_dir: str | None = None
    log_file: str | None = None
    log_level: str = "info"
    cpu_port: int | None = None
    priority_levels: int = 1
    queue_depth_pkts: int = 64
    lag_accounting: bool = True      # False (--no-lag-accounting): no ingress/TM lateness, lag_stats refuses


class EmbeddedSwitch:
    """A running software switch over real interfaces; ``run()`` until ``stop()`` (SIGTERM/SIGINT)."""

    def __init__(self, pipeline: SwitchPipeline, config: SwitchConfig, clock: Clock | None = None) -> None:
        self.pipeline = pipeline
        self.config = config
        self.clock = clock or get_clock()
        try:
            self.log = make_logger(f"dev{config.device_id}", config.log_level, config.log_file)
        except OSError as exc:
            raise SwitchSetupError(f"--log-file {config.log_file}: cannot write it: {exc.strerror or exc}") \
                from None
        self.trace = self.log.isEnabledFor(TRACE)
        self.tm = TrafficManager(priority_levels=config.priority_levels,
                                 default_depth_pkts=config.queue_depth_pkts)
        pipeline.attach_traffic_manager(self.tm, self)
        self.pfc = PfcManager(self.tm, self.transmit, device_id=config.device_id, log=self.log)
        self.lag = SwitchLag()               # how late ingress and the TM serviced their events (lag_stats)
        self.lag_on = config.lag_accounting
        self._rx_port: int | None = None     # ingress port of the packet being processed (PFC accounting)
        self._rx_pfc_prio = 0                # its priority by the DSCP map (when the program sets none)
        self._prio_slot = pipeline.pipe.program.sm.get("priority")   # standard_metadata.priority in a packet
        self.selector = selectors.DefaultSelector()
        self.ports: dict[int, SwitchPort] = {}
        self._ring_ports: list[SwitchPort] = []   # ports with a transmit ring: flushed once per loop iteration
        self.drops: dict[int, DropCounters] = {}
        self.running = False
        self.pcaps: dict[tuple[int, str], PcapWriter] = {}
        # pcap timestamps are network time from the one clock, placed on the calendar once at start
        self._pcap_epoch_ns = time.time_ns() - self.clock.now_ns()
        self._last_flush_ns = 0
        self.ctl: ControlServer | None = None
        self.packet_in_listeners: list[Callable[[bytes], None]] = []   # CPU-port frames (P4Runtime PacketIn)
        self.digest_listeners: list[Callable[[dict[str, Any]], None]] = []   # digests (P4Runtime DigestList)
        self._wakeup: tuple[socket.socket, socket.socket] | None = None
        try:
            if config.pcap_dir:
                try:
                    Path(config.pcap_dir).mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise SwitchSetupError(f"--pcap {config.pcap_dir}: cannot write there: "
                                           f"{exc.strerror or exc}") from None
            for port_num, ifname in config.interfaces:
                port = SwitchPort(port_num, ifname, rx_timestamps=config.lag_accounting)
                self.ports[port_num] = port
                if port.tx_ring is not None:
                    self._ring_ports.append(port)
                self.selector.register(port.sock, selectors.EVENT_READ, port)
                if config.pcap_dir:
                    try:
                        for direction in ("in", "out"):
                            self.pcaps[(port_num, direction)] = PcapWriter(
                                Path(config.pcap_dir) / f"{ifname}_{direction}.pcap")
                    except OSError as exc:
                        raise SwitchSetupError(f"--pcap {config.pcap_dir}: cannot write there: "
                                               f"{exc.strerror or exc}") from None
            if config.ctl:
                self.ctl = ControlServer(config.ctl, self.selector, self.execute, self.describe,
                                         self.inject, self.port_stats, self.complete)
        except BaseException:
            self.close()
            raise

    # --- control ---------------------------------------------------------------------------------------------
    def execute(self, line: str) -> str:
        """One simple_switch_CLI command (or ``port_stats``) against this switch."""
        words = line.split()
        if not words:
            return ""
        if words[0] == "port_stats_reset":
            if len(words) != 1:
                raise CommandError("port_stats_reset takes no arguments")
            self.reset_port_stats()
            return ""
        if words[0] == "port_stats":
            if len(words) > 2 or (len(words) == 2 and not words[1].isdigit()):
                raise CommandError(f"port_stats {' '.join(words[1:])!r}: usage: port_stats [<port>]")
            return self.port_stats_text(int(words[1]) if len(words) == 2 else None)
        if words[0] in PFC_COMMANDS:
            return self.pfc.execute(words, self.clock.now_ns())
        if words[0] in TM_COMMANDS:
            return self.tm.execute(words, self.clock.now_ns())
        if words[0] in LAG_COMMANDS:
            if not self.lag_on:       # no figures rather than empty ones that would read as "never late"
                raise CommandError(f"{words[0]}: this switch runs with --no-lag-accounting: no lag figures")
            return self.lag.execute(words)
        if words == ["help"]:
            return self.pipeline.execute(line) + "\n" + "\n".join([*PFC_COMMANDS.values(), *TM_COMMANDS.values(),
                                                                   *LAG_COMMANDS.values()])
        out = self.pipeline.execute(line)
        if words[0] == "set_port_rate":       # a line rate changed: so did one MTU's serialization time
            self.lag.follow_port_rates([r for r in map(self.tm.port_rate_Bps, self.tm.ports) if r])
        return out

    def wall_ns(self, now_ns: int) -> int:
        """Network time ``now_ns`` on the calendar (ns since the epoch), as pcap timestamps place it."""
        return self._pcap_epoch_ns + now_ns

    def replace_pipeline(self, pipeline: SwitchPipeline) -> None:
        """Run another compiled program from the next packet on (P4Runtime's SetForwardingPipelineConfig);
        called between packets on this switch's loop, with no packet queued in the traffic manager."""
        if self.tm.queued_pkts:
            raise CommandError("cannot replace the program while packets are queued")
        pipeline.attach_traffic_manager(self.tm, self)
        self.pipeline = pipeline
        self._prio_slot = pipeline.pipe.program.sm.get("priority")
        self.log.info("switch %d: program replaced (%s)", self.config.device_id, pipeline.pipe.program.name)

    def describe(self) -> dict[str, list[str]]:
        """Command and object names for the shell: the pipeline's plus this switch's PFC and TM commands."""
        info = self.pipeline.describe()
        return {**info, "commands": sorted({*info["commands"], *PFC_COMMANDS, *TM_COMMANDS, *LAG_COMMANDS})}

    def complete(self, line: str) -> list[str]:
        """Tab completion: command names (the PFC and TM ones too), their keywords and port numbers, else the
        pipeline's (tables, actions, ...)."""
        words = line.split()
        if len(words) <= 1 and not line.endswith(" "):
            prefix = words[0] if words else ""
            return [c for c in self.describe()["commands"] if c.startswith(prefix)]
        cmd = words[0]
        if cmd in LAG_COMMANDS:
            arg = len(words) - 1 if line.endswith(" ") else len(words) - 2
            prefix = "" if line.endswith(" ") else words[-1]
            return [c for c in ("json", "reset", "bound") if c.startswith(prefix)] if arg == 0 else []
        if cmd not in PFC_COMMANDS and cmd not in TM_COMMANDS:
            return self.pipeline.complete(line)
        arg = len(words) - 1 if line.endswith(" ") else len(words) - 2      # index of the argument being typed
        ports = [str(n) for n in sorted(set(self.ports) | set(self.tm.ports))]
        choices: dict[str, list[list[str]]] = {
            "pfc_enable": [ports, ["0", "1"], ["all", *(str(p) for p in range(8))]], "pfc_thresholds": [ports],
            "pfc_watchdog": [ports],
            "pfc_stats": [ports], "pfc_dscp_map": [[], [str(p) for p in range(8)] + ["off", "int"]],
            "tm_scheduler": [list(SCHEDULERS), ports], "tm_qdepth_scope": [list(QDEPTH_SCOPES)],
            "queue_stats": [ports],
        }
        options = choices.get(cmd, [])
        prefix = "" if line.endswith(" ") else words[-1]
        return [c for c in options[arg] if c.startswith(prefix)] if arg < len(options) else []

    def reset_port_stats(self) -> None:
        """Zero the per-port counters and restart the high-water marks from the current queue depths."""
        for port in self.ports.values():
            port.counters = type(port.counters)()
        self.drops.clear()
        self.tm.reset_counters()
        self.pfc.reset_counters()
        self.lag.execute(["lag_stats", "reset"])

    def port_stats(self) -> dict[int, dict[str, Any]]:
        """Per port: interface, rx/tx packets and bytes, drops by cause, queue depth, high-water mark and the
        time-weighted depth's p50/p99 (network time since the last reset)."""
        self.flush_ports()                   # queued frames leave now: tx counters count every frame sent so far
        nums = sorted(set(self.ports) | set(self.tm.ports) | set(self.drops))
        out: dict[int, dict[str, Any]] = {}
        now_ns = self.clock.now_ns()
        for n in nums:
            port = self.ports.get(n)
            c = port.counters if port else None
            d = self.drops.get(n, DropCounters())
            q = self.tm.port_counters(n)
            out[n] = {
                "iface": port.ifname if port else "-", "up": bool(port and port.up),
                "tx_ring": bool(port and port.tx_ring is not None),
                "rx_pkts": c.rx_pkts if c else 0, "rx_bytes": c.rx_bytes if c else 0,
                "rx_kernel_drops": port.poll_kernel_drops() if port else 0,
                "tx_pkts": c.tx_pkts if c else 0, "tx_bytes": c.tx_bytes if c else 0,
                "tx_errors": c.tx_errors if c else 0, "tx_ring_full": c.tx_ring_full if c else 0,
                "pipeline_drop_pkts": d.pipeline_drop_pkts, "queue_drop_pkts": q["queue_drop_pkts"],
                "no_port_drop_pkts": d.no_port_drop_pkts, "pipeline_error_pkts": d.pipeline_error_pkts,
                "mac_control_pkts": d.mac_control_pkts,
                "qdepth_pkts": q["qdepth_pkts"], "high_water_pkts": q["high_water_pkts"],
                "queue_p50_pkts": q["queue_p50_pkts"], "queue_p99_pkts": q["queue_p99_pkts"],
                **{k: v for k, v in self.pfc.port_totals(n, now_ns).items() if k in PORT_STATS_PFC},
            }
        return out

    def port_stats_text(self, only: int | None = None) -> str:
        stats = self.port_stats()
        if only is not None:
            if only not in stats:
                raise CommandError(f"port_stats {only}: no such port (ports: {sorted(stats)})")
            stats = {only: stats[only]}
        cols = ["rx_pkts", "rx_bytes", "rx_kernel_drops", "tx_pkts", "tx_bytes", "tx_errors", "tx_ring_full",
                "pipeline_drop_pkts",
                "queue_drop_pkts", "no_port_drop_pkts", "pipeline_error_pkts", "mac_control_pkts", "qdepth_pkts",
                "high_water_pkts", "queue_p50_pkts", "queue_p99_pkts",
                *PORT_STATS_PFC]
        rows = [["port", "iface", "up", "tx_ring", *cols]]
        for n, s in stats.items():
            rows.append([str(n), s["iface"], str(int(s["up"])), str(int(s["tx_ring"])), *(str(s[c]) for c in cols)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join(" ".join(v.rjust(w) if i != 1 else v.ljust(w) for i, (v, w) in
                                  enumerate(zip(r, widths, strict=True))).rstrip() for r in rows)

    # --- data path -----------------------------------------------------------------------------------------
    def _drop(self, port: int) -> DropCounters:
        d = self.drops.get(port)
        if d is None:
            d = self.drops[port] = DropCounters()
        return d

    def receive(self, port_num: int, frame: bytes, now_ns: int) -> None:
        """One frame from a port (or injected by the controller) through ingress into the queues."""
        if self.pcaps:
            w = self.pcaps.get((port_num, "in"))
            if w:
                w.write(frame, self._pcap_epoch_ns + now_ns)
        if self.trace:
            self.log.log(TRACE, "rx port %d: %s", port_num, frame_summary(frame))
        if is_mac_control(frame):          # a bridge consumes MAC control frames: PFC honoured, never forwarded
            self._drop(port_num).mac_control_pkts += 1
            self.pfc.on_frame(port_num, frame, now_ns)
            return
        pfc = self.pfc
        if pfc.classifying:
            self._rx_port = port_num
            self._rx_pfc_prio = pfc.classify(frame, 0)
        try:
            res = self.pipeline.ingress(port_num, frame)
            if res.dropped is not None:
                self._drop(port_num).pipeline_drop_pkts += 1
                if self.trace:
                    self.log.log(TRACE, "port %d: dropped in ingress (%s)", port_num, res.dropped)
            for qp in res.queued:
                self.enqueue(qp.egress_port, qp, qp.length_bytes, now_ns, qp.priority)
        except Exception as exc:  # one bad packet must not stop the switch
            self._pipeline_failed(port_num, 1, "ingress", exc)
            return
        finally:
            self._rx_port = None
        if self.pipeline.has_digests():
            self._publish_digests()

    def _receive_batch(self, port_num: int, frames: list[bytes], now_ns: int) -> bool:
        """Fast path while every queue is empty and unshaped: the pipeline's batched mode, same result as
        per-frame cut-through; False when the pipeline has no batched mode."""
        pipeline = self.pipeline
        drops_before = pipeline.drop_total()
        prios: list[int] | None = [] if self.tm.priority_levels > 1 else None   # each output's TM queue
        try:
            out = pipeline.process_batch(port_num, frames, prios)
        except Exception as exc:  # one bad packet must not stop the switch
            self._pipeline_failed(port_num, len(frames), "batched pipeline", exc)
            return True
        if out is None:
            return False
        if self.pcaps:
            w = self.pcaps.get((port_num, "in"))
            if w:
                ts = self._pcap_epoch_ns + now_ns
                for frame in frames:
                    w.write(frame, ts)
        dropped = pipeline.drop_total() - drops_before
        if dropped:
            self._drop(port_num).pipeline_drop_pkts += dropped
        per_queue: dict[tuple[int, int], int] = {}
        ports, transmit, plain = self.ports, self.transmit, not self.pcaps
        out_prios = prios if prios is not None and len(prios) == len(out) else None
        for i, (out_port, frame) in enumerate(out):
            key = (out_port, out_prios[i] if out_prios is not None else 0)
            per_queue[key] = per_queue.get(key, 0) + 1
            port = ports.get(out_port)
            if plain and port is not None:
                port.send(frame)
            else:
                transmit(out_port, frame, now_ns)
        for (out_port, prio), n in per_queue.items():
            self.tm.note_cut_through(out_port, n, prio)
        if pipeline.has_digests():
            self._publish_digests()
        return True

    def _receive_queued(self, port_num: int, frames: list[bytes], now_ns: int) -> None:
        """``receive`` per frame, then egress of what is due, in that order, over the pipeline's lean batched
        ingress (without trace, pcaps or PFC, which hook in per frame)."""
        if any(map(is_mac_control, frames)):
            for frame in frames:
                self.receive(port_num, frame, now_ns)
                if self.tm.queued_pkts and self.tm.has_due(now_ns):
                    self._service(now_ns)
            return
        pipeline, tm, enqueue = self.pipeline, self.tm, self.enqueue
        done, n, in_body = 0, len(frames), False
        while done < n:
            try:
                for r in pipeline.ingress_batch(port_num, frames[done:] if done else frames):
                    done += 1
                    in_body = True
                    if type(r) is not list:
                        if r.dropped is not None:
                            self._drop(port_num).pipeline_drop_pkts += 1
                        r = r.queued
                    elif not r:
                        self._drop(port_num).pipeline_drop_pkts += 1
                    for qp in r:
                        enqueue(qp.egress_port, qp, qp.length_bytes, now_ns, qp.priority)
                    if tm.queued_pkts and tm.has_due(now_ns):
                        self._service(now_ns)
                    in_body = False
            except Exception as exc:  # one bad packet must not stop the switch
                if not in_body:           # ingress raised: the generator is done, go on after that frame
                    done += 1
                in_body = False
                self._pipeline_failed(port_num, 1, "ingress", exc)
        if pipeline.has_digests():
            self._publish_digests()

    def inject(self, port_num: int, frame: bytes) -> None:
        """A controller's packet-out: into ingress as if received on ``port_num``, then out of the queues."""
        now_ns = self.clock.now_ns()
        self.receive(port_num, frame, now_ns)
        if self.tm.queued_pkts:
            self._service(now_ns)

    def enqueue(self, egress_port: int, item: Any, length_bytes: int, now_ns: int, priority: int) -> bool:
        """Into the traffic manager; straight on to egress when the port is idle and unshaped."""
        in_port = self._rx_port
        if in_port is not None and not priority and self._rx_pfc_prio:
            # the program left priority 0: the DSCP map's class, written into the packet so egress (INT's
            # queue id) sees the queue it went through, as if ingress had set standard_metadata.priority
            priority = self._rx_pfc_prio
            if self._prio_slot is not None and hasattr(item, "S"):
                item.S[self._prio_slot] = priority
        if not self.pfc.active:
            in_port = None                   # classified only: no PFC buffer accounting
        tp = self.tm.cut_through(egress_port, item, length_bytes, now_ns, priority)
        if tp is not None:
            for out_port, frame in self._egress(tp, now_ns):
                self.transmit(out_port, frame, now_ns)
            return True
        pfc_prio = min(priority, 7)
        if in_port is not None and not self.pfc.admit(in_port, pfc_prio, length_bytes):
            if self.trace:
                self.log.log(TRACE, "port %d priority %d: beyond PFC headroom: drop", in_port, pfc_prio)
            return False
        qp = self.tm.enqueue(egress_port, item, length_bytes, now_ns, priority)
        if qp is None:
            if self.trace:
                self.log.log(TRACE, "queue of port %d full: tail drop", egress_port)
            return False
        if in_port is not None:
            self.pfc.on_enqueued(qp, in_port, pfc_prio, length_bytes, now_ns)
        return True

    def _egress(self, tp: Any, now_ns: int) -> list[tuple[int, bytes]]:
        try:
            return self.pipeline.egress(tp, now_ns)
        except Exception as exc:  # one bad packet must not stop the switch
            self._pipeline_failed(tp.egress_port, 1, "egress", exc)
            return []

    def _pipeline_failed(self, port_num: int, n_pkts: int, stage: str, exc: Exception) -> None:
        """Count and log (the first few, then every 1000th) packets the pipeline raised on."""
        d = self._drop(port_num)
        d.pipeline_error_pkts += n_pkts
        if d.pipeline_error_pkts <= 5 * n_pkts or d.pipeline_error_pkts % 1000 < n_pkts:
            self.log.error("port %d: %s raised %s: %s (%d packet(s) dropped so far; a target bug)", port_num,
                           stage, type(exc).__name__, exc, d.pipeline_error_pkts)

    def _service(self, now_ns: int) -> None:
        """Run every packet due to leave the queues by ``now_ns`` through egress and out of its port."""
        tm = self.tm
        while tm.queued_pkts:
            due = tm.dequeue_due(now_ns, RX_BATCH_FRAMES)
            if not due:
                return
            pfc = self.pfc
            if not (pfc.active or self.trace):     # batched egress: same order and results, less per packet
                for qp in due:
                    pfc.on_dequeued(qp, now_ns)
                self.pipeline.egress_batch(due, now_ns, self.transmit)
            else:
                for qp in due:
                    pfc.on_dequeued(qp, now_ns)
                    for out_port, frame in self._egress(qp, now_ns):
                        self.transmit(out_port, frame, now_ns)
            if self._ring_ports:
                self.flush_ports()               # the batch leaves now, not at the end of the loop iteration
            if self.lag_on:
                # lateness vs the departures the schedule gave them, at the time the batch left (egress run and
                # handed to the kernel): its first is the latest, its last the least late (half the batch counted
                # at each: two records, not one per packet)
                sent_ns = self.clock.now_ns()
                n, lag = len(due), self.lag.tm
                if n > 1:
                    lag.record(sent_ns - due[0].deq_timestamp_ns, n - (n >> 1))
                    lag.record(sent_ns - due[-1].deq_timestamp_ns, n >> 1)
                else:
                    lag.record(sent_ns - due[0].deq_timestamp_ns)
            if self.pipeline.has_digests():
                self._publish_digests()

    def transmit(self, port_num: int, frame: bytes, now_ns: int) -> None:
        port = self.ports.get(port_num)
        if self.trace:
            self.log.log(TRACE, "tx port %d: %s", port_num, frame_summary(frame))
        if port is None:
            if port_num == self.config.cpu_port and (self.ctl is not None or self.packet_in_listeners):
                if self.ctl is not None:
                    self.ctl.publish("packet_in", {"port": port_num, "frame": frame.hex()})
                for listener in self.packet_in_listeners:
                    listener(frame)
                return
            self._drop(port_num).no_port_drop_pkts += 1
            return
        if self.pcaps:
            w = self.pcaps.get((port_num, "out"))
            if w:
                w.write(frame, self._pcap_epoch_ns + now_ns)
        port.send(frame)

    def flush_ports(self) -> None:
        """Transmit every frame queued in the ports' transmit rings (one syscall per port with frames)."""
        for port in self._ring_ports:
            port.flush()

    def _publish_digests(self) -> None:
        digests = self.pipeline.take_digests()
        if not digests:
            return
        for d in digests:
            if self.trace:
                self.log.log(TRACE, "digest %s", d)
            if self.ctl is not None:
                self.ctl.publish("digest", d)
            for listener in self.digest_listeners:
                listener(d)

    # --- loop --------------------------------------------------------------------------------------------------
    def run(self, duration_ns: int | None = None) -> None:
        """Forward until ``stop()`` (or for ``duration_ns`` of network time)."""
        self.running = True
        clock, tm, sel, ring_ports = self.clock, self.tm, self.selector, self._ring_ports
        start_ns = clock.now_ns()
        self.log.info("switch %d running: %s%s", self.config.device_id,
                      " ".join(f"{n}@{p.ifname}" for n, p in sorted(self.ports.items())),
                      f", control on {self.config.ctl}" if self.config.ctl else "")
        while self.running:
            now_ns = clock.now_ns()
            if duration_ns is not None and now_ns - start_ns >= duration_ns:
                break
            nxt = tm.next_departure_ns()
            if self.pfc.ports:
                self.pfc.poll(now_ns)
                pfc_nxt = self.pfc.next_deadline_ns()
                if pfc_nxt is not None and (nxt is None or pfc_nxt < nxt):
                    nxt = pfc_nxt
            if nxt is None:
                timeout_s = IDLE_WAKEUP_S
            else:
                timeout_s = max(0.0, min(IDLE_WAKEUP_S, clock.wall_duration_ns(nxt - now_ns) / 1e9))
            for port in ring_ports:              # before waiting: nothing queued waits past this iteration
                port.flush()
            events = sel.select(timeout_s)
            for key, _mask in events:
                data = key.data
                if isinstance(data, SwitchPort):
                    frames = data.recv_batch(RX_BATCH_FRAMES)
                    if frames:
                        num = data.port_num
                        now_ns = clock.now_ns()
                        if data.rx_first_ts_ns:
                            self._rx_lag(data, len(frames))
                        if not (tm.queued_pkts or tm.any_shaped or self.trace or self.pfc.classifying) and \
                                self._receive_batch(num, frames, now_ns):
                            continue
                        if not (self.trace or self.pfc.classifying or self.pcaps):
                            self._receive_queued(num, frames, now_ns)
                            continue
                        receive = self.receive
                        for frame in frames:
                            receive(num, frame, now_ns)
                            if tm.queued_pkts and tm.has_due(now_ns):
                                self._service(now_ns)
                    if not data.up:
                        self._port_gone(data)
                else:
                    data(key.fileobj)
            now_ns = clock.now_ns()
            if tm.queued_pkts:
                self._service(now_ns)
            if now_ns - self._last_flush_ns >= PCAP_FLUSH_NS:
                self._housekeeping(now_ns)
        self.flush_ports()
        self.log.info("switch %d stopping", self.config.device_id)

    def _rx_lag(self, port: SwitchPort, n: int) -> None:
        """Ingress lateness of a received batch: now vs the kernel's receive times of its first and last frame
        (``sw.clock.lag.record_rx_batch``)."""
        record_rx_batch(self.lag.ingress, self.clock, n, port.rx_first_ts_ns, port.rx_last_ts_ns)

    def _port_gone(self, port: SwitchPort) -> None:
        self.log.warning("port %d: interface %s is gone (%s); other ports keep forwarding",
                         port.port_num, port.ifname, port.last_error)
        try:
            self.selector.unregister(port.sock)
        except (KeyError, ValueError):
            pass

    def _housekeeping(self, now_ns: int) -> None:
        self._last_flush_ns = now_ns
        for w in self.pcaps.values():
            w.flush()
        for port in self.ports.values():
            if port.up and not port.exists():
                port.up = False
                port.last_error = "interface deleted"
                self._port_gone(port)

    def stop(self, *_args: object) -> None:
        self.running = False

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop the loop at once: the wake-up socket makes the pending select() return."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        self._wakeup = (r, w)
        signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        self.selector.register(r, selectors.EVENT_READ, self._drain_wakeup)

    def _drain_wakeup(self, sock: socket.socket) -> None:
        try:
            while sock.recv(512):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        if self._wakeup is not None:
            signal.set_wakeup_fd(-1)
            for sock in self._wakeup:
                sock.close()
            self._wakeup = None
        if self.ctl is not None:
            self.ctl.close()
            self.ctl = None
        for w in self.pcaps.values():
            w.close()
        for port in self.ports.values():
            try:
                self.selector.unregister(port.sock)
            except (KeyError, ValueError):
                pass
            port.close()
        self.selector.close()
