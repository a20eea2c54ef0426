"""Sequential restoring divider with a saturating quotient: the exact ``//`` of the golden models in RTL.

``q = min(n // d, 2^q_bits - 1)`` (also ``2^q_bits - 1`` for ``d == 0``): one clock checks for overflow
(``n >= d << q_bits``), then ``steps`` quotient bits are resolved per clock.  A quotient that the model
saturates or clamps right after (or that is bounded by construction) therefore needs only ``q_bits``
iterations however wide the operands are.

With ``chunk_bits`` the subtraction is instead split into carry chains of at most that many bits, one per
clock (the borrow between them registered): each quotient bit then takes ``ceil(W / chunk_bits)`` clocks for
``W = max(n_bits, d_bits + q_bits)``, and the overflow check is the first such iteration (``d << q_bits``); a
saturated quotient does not end the division early, so ``busy`` and ``done`` are decoded from flip-flops only
and the longest path is one chunk's chain plus one LUT (timing closure at 400 MHz).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError


def iter_clocks(q_bits: int, steps: int) -> int:
    """Clocks a non-saturating division spends iterating: ``ceil(q_bits / steps)``."""
    return -(-q_bits // steps)


def chunk_count(n_bits: int, d_bits: int, q_bits: int, chunk_bits: int) -> int:
    """Clocks per quotient bit of a chunked divider (1 without chunking)."""
    return -(-max(n_bits, d_bits + q_bits) // chunk_bits) if chunk_bits else 1


def divider_clocks(n_bits: int, d_bits: int, q_bits: int, steps: int = 1, chunk_bits: int = 0) -> int:
    """Clocks from ``start`` to ``done`` of a ``SeqDivider`` whose quotient does not saturate."""
    if chunk_bits:
        return 1 + (q_bits + 1) * chunk_count(n_bits, d_bits, q_bits, chunk_bits)
    return 1 + iter_clocks(q_bits, steps)


class SeqDivider(wiring.Component):
    """Floor division of unsigned ``n`` by ``d``, quotient saturated to ``q_bits``.

    Pulse ``start`` with ``n`` and ``d`` valid (ignored while ``busy``); ``done`` rises ``clocks`` clocks later
    and stays high, with ``q`` held, until the next ``start``.
    """

    def __init__(self, n_bits: int, d_bits: int, q_bits: int, steps: int = 1, chunk_bits: int = 0) -> None:
        for name, value, lo, hi in (("n_bits", n_bits, 1, 512), ("d_bits", d_bits, 1, 512),
                                    ("q_bits", q_bits, 1, 64), ("steps", steps, 1, 8),
                                    ("chunk_bits", chunk_bits, 0, 512)):
            if not lo <= value <= hi:
                raise HwParamError(f"divider {name}={value}: must be in {lo}..{hi}")
        if chunk_bits and steps != 1:
            raise HwParamError(f"divider steps={steps}: a chunked divider resolves 1 quotient bit at a time")
        self.n_bits, self.d_bits, self.q_bits, self.steps, self.chunk_bits = n_bits, d_bits, q_bits, steps, chunk_bits
        self.phases = chunk_count(n_bits, d_bits, q_bits, chunk_bits)
        self.iter_clocks = iter_clocks(q_bits, steps)
        super().__init__({
            "start": In(1), "n": In(n_bits), "d": In(d_bits),
            "busy": Out(1), "done": Out(1), "q": Out(q_bits),
        })

    @property
    def clocks(self) -> int:
        """Clocks from ``start`` to ``done`` when the quotient does not saturate."""
        return divider_clocks(self.n_bits, self.d_bits, self.q_bits, self.steps, self.chunk_bits)

    @property
    def saturated_clocks(self) -> int:
        """Clocks from ``start`` to ``done`` when the quotient saturates (``n >= d << q_bits``): all of them when
        chunked (``done`` waits on no carry chain), else 1."""
        return self.clocks if self.chunk_bits else 1

    def elaborate(self, platform):
        if self.chunk_bits:
            return self._elaborate_chunked()
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


    def _elaborate_chunked(self) -> Module:
        """One quotient bit per ``phases`` clocks: chunk j of ``r - dd`` settles in clock j (registered borrow).

        What an iteration's last clock does is known a clock ahead, in flip-flops (``at_*``, zero while idle),
        and a saturating check does not end the division early (``q`` stays all ones), so ``q`` and ``r`` are one
        LUT behind the last chunk's carry chain and ``busy``/``done`` do not depend on it.
        """
        m = Module()
        c, n_ph = self.chunk_bits, self.phases
        width = n_ph * c
        r = Signal(self.n_bits)
        dd = Signal(self.d_bits + self.q_bits)
        q = Signal(self.q_bits)
        ph = Signal(range(n_ph))
        left = Signal(range(self.q_bits + 2))
        check = Signal()                               # this iteration is the overflow check
        at_last = Signal()                             # busy and ph == n_ph - 1: the last chunk settles now
        at_check = Signal()                            # at_last of the overflow check (ge: saturated)
        at_shift = Signal()                            # at_last of a quotient bit, not saturated (ge shifts into q)
        at_end = Signal()                              # at_last of the last quotient bit (done)
        sat = Signal()                                 # the check found n >= d << q_bits: q stays all ones
        m.d.comb += self.q.eq(q)
        r_w, dd_w = Signal(width), Signal(width)
        m.d.comb += [r_w.eq(r), dd_w.eq(dd)]
        diff_lo = Signal(width - c)                     # settled low chunks of r - dd
        carry = Signal(n_ph)                            # carry (no borrow) out of chunk j, registered
        last = Signal(c + 1)
        for j in range(n_ph):
            a, b = r_w[j * c:(j + 1) * c], dd_w[j * c:(j + 1) * c]
            d_j = Signal(c + 1, name=f"diff{j}")
            # a - b - borrow as a + ~b + carry: the carry-in of one chain, no second adder
            m.d.comb += d_j.eq(a + (~b)[:c] + (carry[j - 1] if j else 1))
            if j < n_ph - 1:
                m.d.sync += [diff_lo[j * c:(j + 1) * c].eq(d_j[:c]), carry[j].eq(d_j[c])]
            else:
                m.d.comb += last.eq(d_j)
        ge = last[c]
        with m.If(self.busy):
            if n_ph > 1:
                # the next clock is a last phase iff this one is the one before (an iteration never ends here)
                nxt = ~at_last & (ph == n_ph - 2)
                m.d.sync += [ph.eq(Mux(at_last, 0, ph + 1)), at_last.eq(nxt), at_check.eq(nxt & check),
                             at_shift.eq(nxt & ~check & ~sat), at_end.eq(nxt & ~check & (left == 1))]
            else:
                # every clock is a last phase: the check, then quotient bits until left reaches 1
                m.d.sync += [at_last.eq(~at_end), at_check.eq(0), at_end.eq(~at_end & (left == 2)),
                             at_shift.eq(~at_end & ~Mux(at_check, ge, sat))]
            with m.If(at_last):
                m.d.sync += [dd.eq(dd >> 1), check.eq(0), left.eq(left - 1)]
                with m.If(ge):
                    m.d.sync += r.eq(Cat(diff_lo, last[:c]))
            # the check sets q to all ones (saturated: held to the end) or zeros; then one quotient bit per iteration
            with m.If(at_check):
                m.d.sync += [q.eq(Cat(*[ge] * self.q_bits)), sat.eq(ge)]
            with m.Elif(at_shift):
                m.d.sync += q.eq(shift_in(q, ge))
            with m.If(at_end):
                m.d.sync += [self.busy.eq(0), self.done.eq(1)]
        with m.Elif(self.start):
            m.d.sync += [self.done.eq(0), r.eq(self.n), dd.eq(self.d << self.q_bits), ph.eq(0),
                         left.eq(self.q_bits + 1), check.eq(1), self.busy.eq(1),
                         at_last.eq(n_ph == 1), at_check.eq(n_ph == 1), at_shift.eq(0), at_end.eq(0)]
        return m


def shift_in(q, bit):
    """``(q << 1) | bit`` truncated to the width of ``q``: append one quotient bit."""
    return ((q << 1) | bit)[:len(q)]
