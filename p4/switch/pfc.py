"""Priority flow control (802.1Qbb) for the switch: ingress buffer accounting, PAUSE generation and honouring.

Per ingress port x priority the bytes of queued packets are counted; crossing ``xoff_bytes`` sends a PFC frame
(full quanta) out of that port toward the upstream sender, refreshed at half the pause time while above
``xon_bytes``; falling to ``xon_bytes`` sends quanta 0 (XON).  Beyond ``xoff_bytes + headroom_bytes`` (the
in-flight allowance) packets are dropped and counted.  A PFC frame received on a port holds that priority's
egress queue toward the port for the quanta (512 bit times each at the port's shaped rate).  A watchdog turns
honouring off for a (port, priority) paused longer than its bound, logs it, and restores it after as long again.
All times are network ns handed in by the switch (``sw.clock``), so tests drive it on a ``ManualClock``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from p4.errors import CommandError
from p4.switch.tm import TrafficManager
from sw.units.pfc_frame import (
    PFC_MAX_QUANTA,
    PFC_PRIORITIES,
    build_pfc_frame,
    frame_dscp,
    parse_pfc_frame,
    quanta_to_ns,
)

DEFAULT_XOFF_BYTES = 48_000
DEFAULT_XON_BYTES = 24_000
DEFAULT_HEADROOM_BYTES = 32_000
DEFAULT_LINE_RATE_BPS = 10e9      # quanta -> time on a port without a shaped rate
NS_PER_MS = 1_000_000
ALL_PRIORITIES = (1 << PFC_PRIORITIES) - 1

PFC_COMMANDS = {
    "pfc_enable": "pfc_enable PORT 0|1 [PRIOS]  (PFC on a port: pause upstream when its ingress buffer fills, "
                  "honour received PFC frames; PRIOS = the lossless priorities, e.g. 3 or 3,4; default all)",
    "pfc_thresholds": "pfc_thresholds PORT XOFF_BYTES XON_BYTES HEADROOM_BYTES  (per ingress priority buffer "
                      "thresholds; drop beyond XOFF+HEADROOM)",
    "pfc_watchdog": "pfc_watchdog PORT BOUND_MS  (ignore pauses on a priority paused longer than BOUND_MS; 0 = off)",
    "pfc_dscp_map": "pfc_dscp_map DSCP PRIORITY|off|int  (priority, and so TM queue, of packets the program leaves "
                    "at priority 0; 'int': DSCP marks INT-over-UDP, classify by the shim's original DSCP)",
    "pfc_stats": "pfc_stats [PORT]  (per port x priority: pauses sent/received, paused time, XOFF events, "
                 "watchdog trips)",
}


@dataclass
class PfcConfig:
    """PFC settings of one port."""

    enabled: bool = False
    priorities: int = ALL_PRIORITIES   # bit p: priority p is lossless (accounted, paused, pauses honoured)
    xoff_bytes: int = DEFAULT_XOFF_BYTES
    xon_bytes: int = DEFAULT_XON_BYTES
    headroom_bytes: int = DEFAULT_HEADROOM_BYTES
    watchdog_ns: int = 0


@dataclass
class PfcCounters:
    """PFC counters of one (port, priority)."""

    pauses_sent: int = 0          # PFC frames with quanta > 0 sent (XOFF and refreshes)
    xon_sent: int = 0
    pauses_rx: int = 0            # PFC frames with quanta > 0 received for this priority
    xon_rx: int = 0
    paused_ns: int = 0            # time this port's egress queue was held by received pauses
    xoff_events: int = 0          # ingress buffer crossed XOFF
    headroom_drop_pkts: int = 0   # ingress buffer beyond XOFF + headroom
    watchdog_trips: int = 0
    watchdog_restores: int = 0
    pauses_ignored: int = 0       # received while the watchdog had tripped


@dataclass
class _Ingress:
    """Buffer use of one (ingress port, priority) and whether the upstream is paused."""

    bytes: int = 0
    xoff: bool = False
    refresh_at_ns: int = 0


@dataclass
class _Egress:
    """Pause state of one (egress port, priority) set by received frames."""

    until_ns: int = 0
    since_ns: int | None = None   # start of the current uninterrupted pause
    counted_ns: int = 0           # paused time is in the counters up to here
    tripped_until_ns: int | None = None


@dataclass
class _PortState:
    config: PfcConfig = field(default_factory=PfcConfig)
    counters: list[PfcCounters] = field(default_factory=lambda: [PfcCounters() for _ in range(PFC_PRIORITIES)])
    ingress: list[_Ingress] = field(default_factory=lambda: [_Ingress() for _ in range(PFC_PRIORITIES)])
    egress: list[_Egress] = field(default_factory=lambda: [_Egress() for _ in range(PFC_PRIORITIES)])


def int_orig_dscp(frame: bytes) -> int | None:
    """The original DSCP an INT-MD over UDP shim (IPv4 or IPv6, after the UDP header) keeps; None when there is
    none."""
    off = 16 if frame[12:14] == b"\x81\x00" else 12
    ip = off + 2
    if frame[off:off + 2] == b"\x08\x00" and len(frame) >= off + 22 and frame[ip + 9] == 17:   # IPv4/UDP
        shim = ip + (frame[ip] & 0x0F) * 4 + 8
    elif frame[off:off + 2] == b"\x86\xdd" and len(frame) >= ip + 40 and frame[ip + 6] == 17:  # IPv6/UDP
        shim = ip + 40 + 8
    else:
        return None
    return frame[shim + 2] & 0x3F if len(frame) > shim + 2 else None


def parse_priorities(text: str) -> int:
    """Bit mask of a priority list ("3", "3,4" or "all")."""
    if text == "all":
        return ALL_PRIORITIES
    mask = 0
    for word in text.split(","):
        if not word.isdigit() or int(word) >= PFC_PRIORITIES:
            raise CommandError(f"pfc_enable: priority {word!r}: allowed 0..{PFC_PRIORITIES - 1} (a list like 3,4, "
                               "or all)")
        mask |= 1 << int(word)
    return mask


def port_mac(device_id: int, port: int) -> bytes:
    """The locally administered source MAC the switch uses for its MAC control frames on ``port``."""
    return bytes([0x02, 0x50, 0x46, device_id & 0xFF, (port >> 8) & 0xFF, port & 0xFF])


class PfcManager:
    """PFC for every port of one switch; ``send(port, frame, now_ns)`` transmits a generated PFC frame."""

    def __init__(self, tm: TrafficManager, send: Callable[[int, bytes, int], None], *, device_id: int = 0,
                 log: logging.Logger | None = None) -> None:
        self.tm = tm
        self.send = send
        self.device_id = device_id
        self.log = log or logging.getLogger("p4.switch.pfc")
        self.ports: dict[int, _PortState] = {}
        self.dscp_priority: dict[int, int] = {}
        self.int_dscps: set[int] = set()      # DSCPs marking INT-over-UDP: classify by the shim's original DSCP
        self.active = False                   # any port enabled: the switch takes the per-packet path
        self.classifying = False              # PFC on or a DSCP map set: each packet's priority is looked up
        self._queued: dict[int, tuple[int, int, int]] = {}   # id(queued packet) -> (ingress port, prio, bytes)

    def _state(self, port: int) -> _PortState:
        st = self.ports.get(port)
        if st is None:
            if port < 0:
                raise CommandError(f"port {port}: must be >= 0")
            st = self.ports[port] = _PortState()
        return st

    # --- configuration -------------------------------------------------------------------------------------
    def enable(self, port: int, on: bool, priorities: int = ALL_PRIORITIES) -> None:
        """PFC on ``port`` for the priorities in the bit mask ``priorities`` (the others stay lossy: no buffer
        accounting, no pauses sent, received pauses for them counted but not honoured)."""
        if not 0 < priorities <= ALL_PRIORITIES:
            raise CommandError(f"pfc_enable: priority mask {priorities:#x}: allowed 0x1..{ALL_PRIORITIES:#x}")
        cfg = self._state(port).config
        cfg.enabled, cfg.priorities = on, priorities
        self.active = any(s.config.enabled for s in self.ports.values())
        self.classifying = self.active or bool(self.dscp_priority)

    def set_thresholds(self, port: int, xoff_bytes: int, xon_bytes: int, headroom_bytes: int) -> None:
        if not 0 < xon_bytes <= xoff_bytes:
            raise CommandError(f"pfc_thresholds: need 0 < XON ({xon_bytes}) <= XOFF ({xoff_bytes}) bytes")
        if headroom_bytes < 0:
            raise CommandError(f"pfc_thresholds: headroom {headroom_bytes} bytes must be >= 0")
        cfg = self._state(port).config
        cfg.xoff_bytes, cfg.xon_bytes, cfg.headroom_bytes = xoff_bytes, xon_bytes, headroom_bytes

    def set_watchdog(self, port: int, bound_ms: float) -> None:
        if not math.isfinite(bound_ms):
            raise CommandError(f"pfc_watchdog: bound {bound_ms} ms must be a finite number of ms >= 0 (0 = off)")
        if bound_ms < 0:
            raise CommandError(f"pfc_watchdog: bound {bound_ms} ms must be >= 0 (0 = off)")
        self._state(port).config.watchdog_ns = int(bound_ms * NS_PER_MS)

    def set_dscp_priority(self, dscp: int, priority: int | None | str) -> None:
        """Map ``dscp`` to ``priority`` (None: remove; "int": the DSCP marks INT-over-UDP, so the priority is
        the one of the original DSCP the INT shim carries, as the INT source saved it)."""
        if not 0 <= dscp < 64:
            raise CommandError(f"pfc_dscp_map: DSCP {dscp}: allowed 0..63")
        self.dscp_priority.pop(dscp, None)
        self.int_dscps.discard(dscp)
        if priority == "int":
            self.int_dscps.add(dscp)
        elif isinstance(priority, int) and not 0 <= priority < PFC_PRIORITIES:
            raise CommandError(f"pfc_dscp_map: priority {priority}: allowed 0..{PFC_PRIORITIES - 1}")
        elif isinstance(priority, int):
            self.dscp_priority[dscp] = priority
        self.classifying = self.active or bool(self.dscp_priority)

    # --- ingress accounting and PAUSE generation -----------------------------------------------------------
    def classify(self, frame: bytes, priority: int) -> int:
        """The packet's PFC priority: the program's, or the DSCP map's when the program left it at 0."""
        if priority or not self.dscp_priority:
            return min(priority, PFC_PRIORITIES - 1)
        dscp = frame_dscp(frame)
        if dscp is None:
            return 0
        if dscp in self.int_dscps:
            inner = int_orig_dscp(frame)
            if inner is not None:
                dscp = inner
        return self.dscp_priority.get(dscp, 0)

    def admit(self, in_port: int, priority: int, length_bytes: int) -> bool:
        """False (counted) when the packet would overflow the port's XOFF + headroom allowance."""
        st = self.ports.get(in_port)
        if st is None or not st.config.enabled or not st.config.priorities >> priority & 1:
            return True
        cfg = st.config
        if st.ingress[priority].bytes + length_bytes > cfg.xoff_bytes + cfg.headroom_bytes:
            st.counters[priority].headroom_drop_pkts += 1
            return False
        return True

    def on_enqueued(self, queued: Any, in_port: int, priority: int, length_bytes: int, now_ns: int) -> None:
        """A packet from ``in_port`` took buffer: count it, pause the upstream when XOFF is crossed."""
        st = self.ports.get(in_port)
        if st is None or not st.config.enabled or not st.config.priorities >> priority & 1:
            return
        self._queued[id(queued)] = (in_port, priority, length_bytes)
        ing = st.ingress[priority]
        ing.bytes += length_bytes
        if not ing.xoff and ing.bytes >= st.config.xoff_bytes:
            ing.xoff = True
            st.counters[priority].xoff_events += 1
            self._send_pause(in_port, st, priority, now_ns)

    def on_dequeued(self, queued: Any, now_ns: int) -> None:
        """A packet left the buffer: release its bytes, resume the upstream at XON."""
        rec = self._queued.pop(id(queued), None)
        if rec is None:
            return
        in_port, priority, length_bytes = rec
        st = self.ports[in_port]
        ing = st.ingress[priority]
        ing.bytes -= length_bytes
        if ing.xoff and ing.bytes <= st.config.xon_bytes:
            ing.xoff = False
            st.counters[priority].xon_sent += 1
            self.send(in_port, build_pfc_frame(port_mac(self.device_id, in_port), {priority: 0}), now_ns)

    def _pause_ns(self, port: int, quanta: int) -> int:
        rate_Bps = self.tm.port_rate_Bps(port)
        return quanta_to_ns(quanta, rate_Bps * 8 if rate_Bps else DEFAULT_LINE_RATE_BPS)

    def _send_pause(self, port: int, st: _PortState, priority: int, now_ns: int) -> None:
        st.counters[priority].pauses_sent += 1
        st.ingress[priority].refresh_at_ns = now_ns + max(1, self._pause_ns(port, PFC_MAX_QUANTA) // 2)
        self.send(port, build_pfc_frame(port_mac(self.device_id, port), {priority: PFC_MAX_QUANTA}), now_ns)

    # --- received PFC frames -------------------------------------------------------------------------------
    def on_frame(self, port: int, frame: bytes, now_ns: int) -> bool:
        """A MAC control frame received on ``port``: honour it if PFC (True when it was a PFC frame)."""
        quanta = parse_pfc_frame(frame)
        if quanta is None:
            return False
        st = self.ports.get(port)
        if st is None or not st.config.enabled:
            return True
        for prio, q in quanta.items():
            c, eg = st.counters[prio], st.egress[prio]
            if q:
                c.pauses_rx += 1
            else:
                c.xon_rx += 1
            if not st.config.priorities >> prio & 1:
                continue                      # a lossy priority on this port: counted, not honoured
            if eg.tripped_until_ns is not None:
                if q:
                    c.pauses_ignored += 1
                continue
            self._close_pause(eg, c, now_ns)
            if q:
                eg.until_ns = now_ns + self._pause_ns(port, q)
                if eg.since_ns is None:
                    eg.since_ns = eg.counted_ns = now_ns
            else:
                eg.until_ns = 0
                eg.since_ns = None
            self._apply(port, st, now_ns)
        return True

    def _close_pause(self, eg: _Egress, c: PfcCounters, now_ns: int) -> None:
        """Account the paused time up to ``now_ns`` (or up to an expiry before it)."""
        if eg.since_ns is None:
            return
        end = min(now_ns, eg.until_ns)
        if end > eg.counted_ns:
            c.paused_ns += end - eg.counted_ns
            eg.counted_ns = end
        if eg.until_ns <= now_ns:
            eg.since_ns = None

    def _apply(self, port: int, st: _PortState, now_ns: int) -> None:
        """Hold each TM queue of ``port`` until the latest pause among the PFC priorities mapped to it."""
        levels = self.tm.priority_levels
        until = [0] * levels
        for prio, eg in enumerate(st.egress):
            q = min(prio, levels - 1)
            until[q] = max(until[q], eg.until_ns)
        for q, t in enumerate(until):
            self.tm.set_paused_until(port, q, t, now_ns)

    # --- timers --------------------------------------------------------------------------------------------
    def next_deadline_ns(self) -> int | None:
        """Earliest time ``poll`` has work: a pause refresh, a pause expiry, a watchdog bound or restore."""
        best: int | None = None
        for st in self.ports.values():
            wd = st.config.watchdog_ns
            for ing in st.ingress:
                if ing.xoff and (best is None or ing.refresh_at_ns < best):
                    best = ing.refresh_at_ns
            for eg in st.egress:
                for t in (eg.until_ns if eg.since_ns is not None else None,
                          eg.since_ns + wd if wd and eg.since_ns is not None else None, eg.tripped_until_ns):
                    if t is not None and (best is None or t < best):
                        best = t
        return best

    def poll(self, now_ns: int) -> None:
        """Refresh pauses about to expire, account expired ones, run the watchdog."""
        for port, st in self.ports.items():
            cfg = st.config
            changed = False
            for prio in range(PFC_PRIORITIES):
                ing, eg, c = st.ingress[prio], st.egress[prio], st.counters[prio]
                if ing.xoff and now_ns >= ing.refresh_at_ns:
                    if cfg.enabled and cfg.priorities >> prio & 1:
                        self._send_pause(port, st, prio, now_ns)
                    else:
                        ing.xoff = False
                if eg.since_ns is not None and cfg.watchdog_ns and now_ns - eg.since_ns >= cfg.watchdog_ns \
                        and eg.until_ns > now_ns:
                    self._close_pause(eg, c, now_ns)
                    c.watchdog_trips += 1
                    eg.tripped_until_ns = now_ns + cfg.watchdog_ns
                    eg.until_ns, eg.since_ns = 0, None
                    changed = True
                    self.log.warning("PFC watchdog: port %d priority %d paused for %.1f ms (bound %.1f ms): "
                                     "ignoring its pauses for %.1f ms", port, prio,
                                     c.paused_ns / NS_PER_MS, cfg.watchdog_ns / NS_PER_MS,
                                     cfg.watchdog_ns / NS_PER_MS)
                elif eg.since_ns is not None and eg.until_ns <= now_ns:
                    self._close_pause(eg, c, now_ns)
                    changed = True
                if eg.tripped_until_ns is not None and now_ns >= eg.tripped_until_ns:
                    eg.tripped_until_ns = None
                    c.watchdog_restores += 1
                    self.log.warning("PFC watchdog: port %d priority %d honours pauses again", port, prio)
            if changed:
                self._apply(port, st, now_ns)

    # --- counters and commands -----------------------------------------------------------------------------
    def counters(self, port: int, now_ns: int | None = None) -> list[dict[str, int]]:
        """Per priority counters of ``port`` (paused time includes a pause still running at ``now_ns``)."""
        st = self.ports.get(port)
        if st is None:
            return [vars(PfcCounters()) for _ in range(PFC_PRIORITIES)]
        if now_ns is not None:
            for eg, c in zip(st.egress, st.counters, strict=True):
                self._close_pause(eg, c, now_ns)
        return [dict(vars(c)) for c in st.counters]

    def port_totals(self, port: int, now_ns: int | None = None) -> dict[str, int]:
        """Counters of ``port`` summed over the priorities, keys prefixed ``pfc_``."""
        per_prio = self.counters(port, now_ns)
        return {f"pfc_{f.name}": sum(p[f.name] for p in per_prio) for f in fields(PfcCounters)}

    def reset_counters(self) -> None:
        for st in self.ports.values():
            st.counters = [PfcCounters() for _ in range(PFC_PRIORITIES)]

    def stats_text(self, only: int | None, now_ns: int) -> str:
        ports = sorted(self.ports) if only is None else [only]
        cols = [f.name for f in fields(PfcCounters)]
        rows = [["port", "prio", "on", "xoff_B", "xon_B", "headroom_B", "buf_B", *cols]]
        for port in ports:
            st = self._state(port)
            cfg = st.config
            for prio, c in enumerate(self.counters(port, now_ns)):
                lossless = cfg.enabled and cfg.priorities >> prio & 1
                if prio and not any(c.values()) and not st.ingress[prio].bytes and \
                        not (lossless and cfg.priorities != ALL_PRIORITIES):
                    continue
                rows.append([str(port), str(prio), str(int(lossless)), str(cfg.xoff_bytes), str(cfg.xon_bytes),
                             str(cfg.headroom_bytes), str(st.ingress[prio].bytes), *(str(c[k]) for k in cols)])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join(" ".join(v.rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows)

    def execute(self, words: list[str], now_ns: int) -> str:
        """One ``pfc_*`` command (see ``PFC_COMMANDS``)."""
        cmd, args = words[0], words[1:]
        usage = f"{cmd} {' '.join(args)!r}: usage: {PFC_COMMANDS[cmd]}"

        def num(s: str) -> int:
            if not s.isdigit():
                raise CommandError(usage)
            return int(s)

        if cmd == "pfc_enable":
            if len(args) not in (2, 3) or args[1] not in ("0", "1"):
                raise CommandError(usage)
            self.enable(num(args[0]), args[1] == "1", parse_priorities(args[2]) if len(args) == 3 else
                        ALL_PRIORITIES)
        elif cmd == "pfc_thresholds":
            if len(args) != 4:
                raise CommandError(usage)
            self.set_thresholds(*(num(a) for a in args))
        elif cmd == "pfc_watchdog":
            if len(args) != 2:
                raise CommandError(usage)
            try:
                bound_ms = float(args[1])
            except ValueError:
                raise CommandError(usage) from None
            self.set_watchdog(num(args[0]), bound_ms)
        elif cmd == "pfc_dscp_map":
            if len(args) != 2:
                raise CommandError(usage)
            self.set_dscp_priority(num(args[0]), None if args[1] == "off" else
                                   "int" if args[1] == "int" else num(args[1]))
        elif cmd == "pfc_stats":
            if len(args) > 1:
                raise CommandError(usage)
            return self.stats_text(num(args[0]) if args else None, now_ns)
        return ""
