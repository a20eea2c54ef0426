"""Run-time state of v1model extern instances: registers, counters, meters (RFC 2698 trTCM, as BMv2)."""

from __future__ import annotations

from dataclasses import dataclass, field

GREEN, YELLOW, RED = 0, 1, 2


class Register:
    """``register<T>(size)``: an array of ``size`` values of ``width`` bits, reset to 0."""

    kind = "register"

    def __init__(self, name: str, size: int, width: int, signed: bool = False) -> None:
        self.name, self.size, self.width, self.signed = name, size, width, signed
        self.values = [0] * size

    def reset(self) -> None:
        self.values[:] = [0] * self.size

    def __deepcopy__(self, memo: dict) -> Register:
        new = object.__new__(Register)
        new.__dict__.update(self.__dict__)
        new.values = self.values[:]                          # ints are immutable: a flat copy is deep
        memo[id(self)] = new
        return new

    def read(self, index: int) -> int:
        return self.values[index] if 0 <= index < self.size else 0

    def write(self, index: int, value: int) -> None:
        if 0 <= index < self.size:
            self.values[index] = value


class Counter:
    """``counter(size, type)`` (indexed) or one cell of a ``direct_counter``: packets and bytes per index."""

    kind = "counter"

    def __init__(self, name: str, size: int, ctype: str, direct: bool = False) -> None:
        self.name, self.size, self.ctype, self.direct = name, size, ctype, direct
        self.packets = [0] * size
        self.bytes = [0] * size

    def count(self, index: int, length: int) -> None:
        if 0 <= index < self.size:
            self.packets[index] += 1
            self.bytes[index] += length

    def reset(self) -> None:
        self.packets[:] = [0] * self.size
        self.bytes[:] = [0] * self.size

    def __deepcopy__(self, memo: dict) -> Counter:
        new = object.__new__(Counter)
        new.__dict__.update(self.__dict__)
        new.packets, new.bytes = self.packets[:], self.bytes[:]
        memo[id(self)] = new
        return new


@dataclass
class MeterCell:
    """Two token buckets of one trTCM (rates in units per µs, bursts in units, like BMv2's CLI)."""

    cir: float = 0.0
    cburst: int = 0
    pir: float = 0.0
    pburst: int = 0
    configured: bool = False
    tc: float = 0.0
    tp: float = 0.0
    last_us: float | None = None

    def execute(self, amount: int, now_us: float) -> int:
        if not self.configured:
            return GREEN
        if self.last_us is None:
            self.tc, self.tp = float(self.cburst), float(self.pburst)
        else:
            dt = max(0.0, now_us - self.last_us)
            self.tc = min(float(self.cburst), self.tc + dt * self.cir)
            self.tp = min(float(self.pburst), self.tp + dt * self.pir)
        self.last_us = now_us
        if self.tp < amount:
            return RED
        if self.tc < amount:
            self.tp -= amount
            return YELLOW
        self.tp -= amount
        self.tc -= amount
        return GREEN


@dataclass
class Meter:
    """``meter(size, type)`` or ``direct_meter``: an array of trTCM cells counting packets or bytes."""

    name: str
    size: int
    mtype: str
    direct: bool = False
    cells: list[MeterCell] = field(default_factory=list)
    kind: str = "meter"
    entry_rates: dict[int, list[tuple[float, int]]] = field(default_factory=dict)   # direct: per entry handle

    def __post_init__(self) -> None:
        if not self.cells:
            self.cells = [MeterCell() for _ in range(self.size)]

    def set_rates(self, index: int | None, rates: list[tuple[float, int]]) -> None:
        """Configure one cell (or all with ``index=None``): [(CIR, CBS), (PIR, PBS)], rates per µs."""
        (cir, cbs), (pir, pbs) = rates
        cells = self.cells if index is None else [self.cells[index]]
        for c in cells:
            c.cir, c.cburst, c.pir, c.pburst, c.configured = cir, cbs, pir, pbs, True
            c.last_us = None

    def execute(self, index: int, length: int, now_us: float) -> int:
        if not 0 <= index < self.size:
            return GREEN
        return self.cells[index].execute(1 if self.mtype == "packets" else length, now_us)
