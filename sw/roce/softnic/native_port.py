"""The SoftNic's wire on the native data path (issue 23 item 4): the same AF_PACKET socket as ``RawSocketPort``, but
the frames a ``SoftNic._transmit`` pass releases leave in one ``sendmmsg`` and a receive burst is one ``recvmmsg``
that also checks each frame's IPv4 checksum and ICRC in C (``sw/roce/native/datapath.c``), so ``decode`` skips
them; the kernel's receive stamps of the burst's first and last frame come as SO_TIMESTAMPNS control messages.

``RawSocketPort`` (Python, one syscall per frame) stays the reference.  ``$STARPULSE_NIC_DATAPATH`` (``native``, the
default, or ``python``), read only by ``nic_datapath()``, chooses for every SoftNic a process opens (``open_port``);
without a C compiler ``native`` falls back to ``python`` with one warning line.
"""

from __future__ import annotations

import os
from typing import Any

from sw.roce.native import build as native_build
from sw.roce.softnic.port import PACKET_HOST, NicPortError, RawSocketPort, keep_other_frame

ENV_NIC_DATAPATH = "STARPULSE_NIC_DATAPATH"
NIC_DATAPATHS = ("native", "python")


def nic_datapath() -> str:
    """The data path ``$STARPULSE_NIC_DATAPATH`` asks for (default native); NicPortError for another value."""
    name = os.environ.get(ENV_NIC_DATAPATH, "").strip() or "native"
    if name not in NIC_DATAPATHS:
        raise NicPortError(f"${ENV_NIC_DATAPATH}={name!r}: expected native or python")
    return name


class NativeRawSocketPort(RawSocketPort):
    """``RawSocketPort`` with batched I/O in C: ``send_batch`` (sendmmsg), ``recv_batch`` (recvmmsg + checks)."""

    def __init__(self, ifname: str, module: Any, **kwargs: Any) -> None:
        super().__init__(ifname, **kwargs)
        self.ffi, self.lib = module.ffi, module.lib
        cap = native_build.MAX_BATCH
        self._rx = self.ffi.new("uint8_t[]", cap * native_build.RX_FRAME_CAP)
        self._rx_bytes = self.ffi.buffer(self._rx)
        self._lens = self.ffi.new("uint32_t[]", cap)
        self._types = self.ffi.new("uint8_t[]", cap)
        self._verdicts = self.ffi.new("uint8_t[]", cap)
        self._stamps = self.ffi.new("int64_t[2]")
        self._tx_lens = self.ffi.new("uint32_t[]", cap)
        if self.rx_timestamps:
            self.rx_timestamps = self.lib.sp_enable_rx_stamps(self.sock.fileno()) == 0
        # per frame of the last recv_batch: nic.RX_CHECKED when C verified its IPv4 checksum and ICRC (SoftNic._receive)
        self.rx_checked = bytearray()

    def send_batch(self, frames: list[bytes]) -> None:
        """Send ``frames`` in order with one sendmmsg per ``MAX_BATCH``; a refused frame counts in ``tx_errors``."""
        cap = native_build.MAX_BATCH
        fd, lens = self.sock.fileno(), self._tx_lens
        for at in range(0, len(frames), cap):
            chunk = frames[at:at + cap]
            for i, frame in enumerate(chunk):
                lens[i] = len(frame)
            sent = self.lib.sp_send_frames(fd, b"".join(chunk), lens, len(chunk))
            self.counters.tx_frames += sent
            self.counters.tx_errors += len(chunk) - sent

    def recv_batch(self, max_frames: int) -> list[bytes]:
        """Up to ``max_frames`` frames for this host (and PFC frames), as ``RawSocketPort.recv_batch``; also sets
        ``rx_checked`` and, with ``rx_timestamps``, ``rx_first_ts_ns``/``rx_last_ts_ns``."""
        got = self.lib.sp_rx_frames(self.sock.fileno(), self._rx, min(max_frames, native_build.MAX_BATCH),
                                    self._lens, self._types, self._verdicts, self._stamps)
        checked = self.rx_checked
        checked.clear()
        if got <= 0:
            return []
        if self.rx_timestamps:
            self.rx_first_ts_ns, self.rx_last_ts_ns = self._stamps[0], self._stamps[1]
        out = []
        c = self.counters
        data, lens, types, verdicts = self._rx_bytes, self._lens, self._types, self._verdicts
        slot = native_build.RX_FRAME_CAP
        for i in range(got):
            at = i * slot
            pkttype = types[i]
            if pkttype != PACKET_HOST:
                frame = data[at:at + lens[i]]
                if keep_other_frame(pkttype, frame, c):
                    out.append(frame)
                    checked.append(0)
                continue
            c.rx_frames += 1
            out.append(data[at:at + lens[i]])
            checked.append(verdicts[i])
        return out


def open_port(ifname: str, **kwargs: Any) -> RawSocketPort:
    """The port of a SoftNic on ``ifname`` on the data path ``nic_datapath()`` names (``kwargs``: RawSocketPort's)."""
    if nic_datapath() == "native":
        module = native_build.load()    # None (one warning line) without a C compiler: the Python port
        if module is not None:
            return NativeRawSocketPort(ifname, module, **kwargs)
    return RawSocketPort(ifname, **kwargs)
