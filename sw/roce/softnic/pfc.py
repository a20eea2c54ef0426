"""The host NIC's priority flow control (802.1Qbb): honour PFC frames from the switch, send them when the
receive backlog fills, count both.

Honouring: a PFC frame pausing the priority this NIC sends on stops its transmit engine (the pacer is not asked
for frames) for the quanta (512 bit times each at the NIC's line rate), or until a quanta-0 frame (XON).
Generating: after each receive burst the NIC reports how many frames it read; a burst of at least
``rx_xoff_frames`` (the socket had that much backlog) sends XOFF, refreshed at half the pause time while the
backlog lasts, and a burst at or below ``rx_xon_frames`` sends XON, as does a poll that finds the receive queue
empty (``on_rx_idle``: the port it paused sends nothing, so no small burst would come to release it, and its pause
would hold the port to the end of the quanta, over and over, as a stuck pause does).  All time is network ns from
``sw.clock``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sw.roce.wire.errors import TruncatedFrameError
from sw.units.pfc_frame import (
    PFC_BODY_END,
    PFC_MAX_QUANTA,
    build_pfc_frame,
    is_mac_control,
    parse_pfc_frame,
    quanta_to_ns,
)

# PFC for every NIC a process opens (any tool: perf, incast, collectives): "PRIO" honours pauses of the
# priority the NIC sends on, "PRIO,XOFF_FRAMES,XON_FRAMES" also pauses the switch on a receive backlog.
ENV_NIC_PFC = "STARPULSE_NIC_PFC"


class PfcConfigError(ValueError):
    """A host PFC setting out of range."""

    is_user_error = True


@dataclass
class NicPfcCounters:
    """PFC seen and sent by one NIC."""

    pauses_rx: int = 0
    xon_rx: int = 0
    paused_ns: int = 0        # time the transmit engine was held by pauses
    pauses_sent: int = 0      # XOFF frames and their refreshes
    xon_sent: int = 0
    xoff_events: int = 0


class NicPfc:
    """PFC state of one NIC sending on ``priority``; ``send(frame)`` puts a generated PFC frame on the wire."""

    def __init__(self, *, mac: str, line_rate_bps: int, send: Callable[[bytes], None], priority: int = 0,
                 rx_xoff_frames: int = 0, rx_xon_frames: int = 0) -> None:
        if not 0 <= priority < 8:
            raise PfcConfigError(f"PFC priority {priority}: allowed 0..7")
        if rx_xoff_frames < 0 or not 0 <= rx_xon_frames <= max(rx_xoff_frames, 0):
            raise PfcConfigError(f"PFC rx thresholds {rx_xoff_frames}/{rx_xon_frames} frames: need "
                                 "0 <= XON <= XOFF (XOFF 0 = never send pauses)")
        self.mac = bytes.fromhex(mac.replace(":", ""))
        self.line_rate_bps = line_rate_bps
        self.send = send
        self.priority = priority
        self.rx_xoff_frames = rx_xoff_frames
        self.rx_xon_frames = rx_xon_frames
        self.counters = NicPfcCounters()
        self.paused_until_ns = 0
        self._counted_ns = 0           # paused time is counted up to here
        self.xoff = False
        """Our XOFF holds the switch port (sent, not yet released by XON)."""
        self._refresh_at_ns = 0

    def quanta_ns(self, quanta: int) -> int:
        return quanta_to_ns(quanta, self.line_rate_bps)

    # --- honouring -----------------------------------------------------------------------------------------
    def on_frame(self, frame: bytes, now_ns: int) -> bool:
        """True when ``frame`` was a PFC frame (consumed here); a pause of our priority holds the transmitter.  A MAC
        control frame too short for the PFC body raises ``TruncatedFrameError`` (the NIC counts it malformed)."""
        if len(frame) < PFC_BODY_END and is_mac_control(frame):
            raise TruncatedFrameError(f"MAC control frame of {len(frame)} bytes is shorter than a PFC frame "
                                      f"({PFC_BODY_END})", len(frame))
        quanta = parse_pfc_frame(frame)
        if quanta is None:
            return False
        q = quanta.get(self.priority)
        if q is None:
            return True
        self._account(now_ns)
        c = self.counters
        if q:
            c.pauses_rx += 1
            if self.paused_until_ns <= now_ns:
                self._counted_ns = now_ns
            self.paused_until_ns = now_ns + self.quanta_ns(q)
        else:
            c.xon_rx += 1
            self.paused_until_ns = 0
        return True

    def _account(self, now_ns: int) -> None:
        end = min(now_ns, self.paused_until_ns)
        if end > self._counted_ns:
            self.counters.paused_ns += end - self._counted_ns
            self._counted_ns = end

    def tx_paused(self, now_ns: int) -> bool:
        """Whether the transmitter must hold now."""
        if self.paused_until_ns > now_ns:
            return True
        if self.paused_until_ns:              # a pause ran out: count it, forget it
            self._account(now_ns)
            self.paused_until_ns = 0
        return False

    # --- generating ----------------------------------------------------------------------------------------
    def on_rx_burst(self, n_frames: int, now_ns: int) -> None:
        """The NIC read ``n_frames`` at once: a backlog of ``rx_xoff_frames`` pauses the switch port feeding us."""
        if not self.rx_xoff_frames:
            return
        c = self.counters
        if n_frames >= self.rx_xoff_frames:
            if not self.xoff:
                self.xoff = True
                c.xoff_events += 1
                self._pause(now_ns)
            elif now_ns >= self._refresh_at_ns:
                self._pause(now_ns)
        elif self.xoff and n_frames <= self.rx_xon_frames:
            self.xoff = False
            c.xon_sent += 1
            self.send(build_pfc_frame(self.mac, {self.priority: 0}))

    def on_rx_idle(self, now_ns: int) -> None:
        """The NIC found its receive queue empty: the backlog that paused the switch port is gone, XON."""
        if self.xoff:
            self.on_rx_burst(0, now_ns)

    def _pause(self, now_ns: int) -> None:
        self.counters.pauses_sent += 1
        self._refresh_at_ns = now_ns + self.quanta_ns(PFC_MAX_QUANTA) // 2
        self.send(build_pfc_frame(self.mac, {self.priority: PFC_MAX_QUANTA}))

    def next_deadline_ns(self) -> int | None:
        """When a pause of our transmitter runs out (None when not paused)."""
        return self.paused_until_ns or None

    def as_dict(self, now_ns: int) -> dict[str, int]:
        self._account(now_ns)
        return dict(vars(self.counters))


def nic_pfc_env(priority: int | None, base: Mapping[str, str]) -> dict[str, str]:
    """``$STARPULSE_NIC_PFC`` for the hosts of a fabric whose lossless class is ``priority`` (None: no PFC, so
    nothing): the priority, or ``base``'s value when that names the same priority (its receive thresholds kept)."""
    if priority is None:
        return {}
    given = base.get(ENV_NIC_PFC, "")
    return {ENV_NIC_PFC: given if given.split(",")[0].strip() == str(priority) else str(priority)}
