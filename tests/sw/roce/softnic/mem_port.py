"""An in-memory NIC port for unit tests: frames handed in by the test, frames sent kept in order."""

from __future__ import annotations

from sw.roce.softnic.port import NicPortCounters


class MemPort:
    """Stands in for a raw socket port (same attributes and calls) without a network namespace."""

    def __init__(self, mac: str = "02:00:00:00:00:01", ip: str = "10.9.0.1", mtu: int = 1500) -> None:
        self.mac, self.ip, self.mtu, self.counters = mac, ip, mtu, NicPortCounters()
        self.rx: list[bytes] = []
        self.tx: list[bytes] = []

    def send(self, frame: bytes) -> None:
        self.tx.append(frame)

    def recv_batch(self, max_frames: int) -> list[bytes]:
        out, self.rx = self.rx[:max_frames], self.rx[max_frames:]
        return out

    def wait(self, timeout_ns: int) -> None:
        return None

    def close(self) -> None:
        return None
