"""The host NIC's line-rate data path as bursts: build + ICRC + AF_PACKET send, and receive + INT strip + ICRC
check, in two interchangeable implementations (``--datapath native|python``).

``python`` is the reference: ``sw.roce.wire.template`` builds each frame, ``socket.send`` sends it, and the
receive side is ``RawSocketPort.recv_batch`` + ``sw.roce.wire.int_md.strip_int`` + ``sw.roce.wire.decode``.
``native`` does the same work in C (``datapath.c`` through cffi: sendmmsg/recvmmsg bursts); it must produce
byte-identical frames (the differential test) and the same receive verdicts.  RC protocol logic is not here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from sw.roce.native import build as native_build
from sw.roce.softnic.port import RawSocketPort
from sw.roce.wire.decode import decode
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.int_md import carries_int, strip_int
from sw.roce.wire.template import PacketTemplate

DATAPATHS = ("native", "python")


@dataclass
class RxCounts:
    """Frames a receiver saw for this host: ``frames == good + bad_icrc + other``."""

    frames: int = 0
    bytes: int = 0
    good: int = 0
    bad_icrc: int = 0
    other: int = 0
    not_for_us: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class TxFlow:
    """One paced flow: its template (payload fixed), the next PSN, and what was sent."""

    template: PacketTemplate
    payload: bytes
    psn: int = 0
    frames: int = 0
    bytes: int = 0
    errors: int = 0
    frame0: bytes = field(default=b"", init=False)

    def __post_init__(self) -> None:
        self.frame0 = self.template.build(0, self.payload)


class Datapath(Protocol):
    """Send a burst of one flow's frames; receive and check what waits on a port."""

    name: str

    def tx_burst(self, port: RawSocketPort, flow: TxFlow, count: int) -> int: ...

    def rx_poll(self, port: RawSocketPort, counts: RxCounts) -> int: ...


def check_frame(frame: bytes) -> int:
    """Python verdict on one received frame (the reference of ``sp_rx_check``): 1 RoCEv2 with a good ICRC (after
    stripping INT), 0 bad ICRC, -1 not RoCEv2 / malformed."""
    try:
        if carries_int(frame):
            frame = strip_int(frame)[0]
        pkt = decode(frame, raise_on_bad_icrc=False)
    except RoceFormatError:
        return -1
    return 1 if pkt.icrc_ok else 0


class PythonDatapath:
    """The reference: one ``PacketTemplate.build`` and one ``send`` per frame; ``decode`` per received frame."""

    name = "python"

    def tx_burst(self, port: RawSocketPort, flow: TxFlow, count: int) -> int:
        build, send, payload = flow.template.build, port.sock.send, flow.payload
        sent = 0
        for _ in range(count):
            frame = build(flow.psn, payload)
            try:
                send(frame)
            except OSError:
                flow.errors += 1
                break
            flow.psn = (flow.psn + 1) & 0xFFFFFF
            sent += 1
            flow.bytes += len(frame)
        flow.frames += sent
        return sent

    def rx_poll(self, port: RawSocketPort, counts: RxCounts) -> int:
        before = port.counters.outgoing_skipped + port.counters.not_for_us
        frames = port.recv_batch(native_build.MAX_BATCH)
        counts.not_for_us += port.counters.outgoing_skipped + port.counters.not_for_us - before
        for frame in frames:
            counts.frames += 1
            counts.bytes += len(frame)
            verdict = check_frame(frame)
            if verdict == 1:
                counts.good += 1
            elif verdict == 0:
                counts.bad_icrc += 1
            else:
                counts.other += 1
        return len(frames)


class NativeDatapath:
    """The same work in C: ``sp_tx_burst`` (build + ICRC + sendmmsg), ``sp_rx_burst`` (recvmmsg + check)."""

    name = "native"

    def __init__(self, module: Any) -> None:
        self.ffi, self.lib = module.ffi, module.lib
        self._scratch: Any = None
        self._scratch_bytes = 0
        self._rx_buf = self.ffi.new("uint8_t[]", native_build.MAX_BATCH * native_build.RX_FRAME_CAP)
        self._counts = self.ffi.new("uint64_t[6]")

    def tx_burst(self, port: RawSocketPort, flow: TxFlow, count: int) -> int:
        count = min(count, native_build.MAX_BATCH)
        n = len(flow.frame0)
        if self._scratch_bytes < n * count:
            self._scratch_bytes = n * native_build.MAX_BATCH
            self._scratch = self.ffi.new("uint8_t[]", self._scratch_bytes)
        sent = self.lib.sp_tx_burst(port.sock.fileno(), flow.frame0, n, flow.psn, count, self._scratch)
        if sent < 0:
            flow.errors += 1
            return 0
        flow.psn = (flow.psn + sent) & 0xFFFFFF
        flow.frames += sent
        flow.bytes += sent * n
        return sent

    def rx_poll(self, port: RawSocketPort, counts: RxCounts) -> int:
        c = self._counts
        for i in range(6):
            c[i] = 0
        got = self.lib.sp_rx_burst(port.sock.fileno(), self._rx_buf, native_build.MAX_BATCH, c)
        if got <= 0:
            return 0
        counts.frames += c[0]
        counts.bytes += c[1]
        counts.good += c[2]
        counts.bad_icrc += c[3]
        counts.other += c[4]
        counts.not_for_us += c[5]
        return got

    def build(self, flow: TxFlow, psn0: int, count: int) -> list[bytes]:
        """``count`` frames from ``psn0`` as ``tx_burst`` sends them (for the differential test)."""
        n = len(flow.frame0)
        out = self.ffi.new("uint8_t[]", n * count)
        if self.lib.sp_build(flow.frame0, n, psn0, count, out) != 0:
            raise ValueError("the native path builds IPv4 RoCEv2 frames without IP options only")
        raw = bytes(self.ffi.buffer(out))
        return [raw[i * n:(i + 1) * n] for i in range(count)]

    def check(self, frame: bytes) -> int:
        """``sp_rx_check`` on one frame (the verdict ``check_frame`` gives in Python)."""
        return int(self.lib.sp_rx_check(frame, len(frame)))


def make_datapath(name: str) -> Datapath:
    """``native`` (falls back to ``python`` with one warning line when no C compiler) or ``python``."""
    if name not in DATAPATHS:
        raise ValueError(f"--datapath {name!r}: expected native or python")
    if name == "native":
        module = native_build.load()
        if module is not None:
            return NativeDatapath(module)
    return PythonDatapath()
