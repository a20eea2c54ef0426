"""Sequential restoring divider with a saturating quotient: the exact ``//`` of the golden models in RTL.

``q = min(n // d, 2^q_bits - 1)`` (also ``2^q_bits - 1`` for ``d == 0``): one clock checks for overflow
(``n >= d << q_bits``), then ``steps`` quotient bits are resolved per clock.  A quotient that the model
saturates or clamps right after (or that is bounded by construction) therefore needs only ``q_bits``
iterations however wide the operands are.
"""

from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError


def iter_clocks(q_bits: int, steps: int) -> int:
    """Clocks a non-saturating division spends iterating: ``ceil(q_bits / steps)``."""
    return -(-q_bits // steps)


class SeqDivider(wiring.Component):
    """Floor division of unsigned ``n`` by ``d``, quotient saturated to ``q_bits``.

    Pulse ``start`` with ``n`` and ``d`` valid (ignored while ``busy``); ``done`` rises ``clocks`` clocks later
    and stays high, with ``q`` held, until the next ``start``.
    """

    def __init__(self, n_bits: int, d_bits: int, q_bits: int, steps: int = 1) -> None:
        for name, value, lo, hi in (("n_bits", n_bits, 1, 512), ("d_bits", d_bits, 1, 512),
                                    ("q_bits", q_bits, 1, 64), ("steps", steps, 1, 8)):
            if not lo <= value <= hi:
                raise HwParamError(f"divider {name}={value}: must be in {lo}..{hi}")
        self.n_bits, self.d_bits, self.q_bits, self.steps = n_bits, d_bits, q_bits, steps
        self.iter_clocks = iter_clocks(q_bits, steps)
        super().__init__({
            "start": In(1), "n": In(n_bits), "d": In(d_bits),
            "busy": Out(1), "done": Out(1), "q": Out(q_bits),
        })

    @property
    def clocks(self) -> int:
        """Clocks from ``start`` to ``done`` when the quotient does not saturate (one when it does)."""
        return 1 + self.iter_clocks

    def elaborate(self, platform):
        m = Module()
        iters = self.iter_clocks * self.steps          # extra leading iterations only yield zero bits
        r = Signal(min(self.n_bits, self.d_bits + self.q_bits))
        dd = Signal(self.d_bits + iters)
        q = Signal(self.q_bits)
        left = Signal(range(self.iter_clocks + 1))
        m.d.comb += self.q.eq(q)

        with m.If(self.busy):
            r_k, dd_k, q_k = r, dd, q
            for _ in range(self.steps):
                ge = r_k >= dd_k
                r_n, dd_n, q_n = Signal.like(r), Signal.like(dd), Signal.like(q)
                m.d.comb += [r_n.eq(Mux(ge, r_k - dd_k, r_k)), dd_n.eq(dd_k >> 1), q_n.eq(shift_in(q_k, ge))]
                r_k, dd_k, q_k = r_n, dd_n, q_n
            m.d.sync += [r.eq(r_k), dd.eq(dd_k), q.eq(q_k), left.eq(left - 1)]
            with m.If(left == 1):
                m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        with m.Elif(self.start):
            m.d.sync += self.done.eq(0)
            with m.If(self.n >= (self.d << self.q_bits)):
                m.d.sync += [q.eq((1 << self.q_bits) - 1), self.done.eq(1)]
            with m.Else():
                m.d.sync += [r.eq(self.n), dd.eq(self.d << (iters - 1)), q.eq(0), left.eq(self.iter_clocks),
                             self.busy.eq(1)]
        return m


def shift_in(q, bit):
    """``(q << 1) | bit`` truncated to the width of ``q``: append one quotient bit."""
    return ((q << 1) | bit)[:len(q)]
