"""Integer-ns time of day from the clock (``NsTimer``), shared by the DCQCN reaction and notification points."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from hw.errors import HwParamError

TIME_BITS = 64


class NsTimer(wiring.Component):
    """Integer-ns time of day from a clock of ``clk_period_ps``: exact, no drift (ps remainder carried).

    Timed for 400 MHz: the ps carry of each step is decided a clock ahead (``carry`` is a register), and the
    64-bit count is two 32-bit halves; the high half selects between itself and a register kept at itself + 1
    on the low half's carry out, so no path holds more than one 32-bit carry chain.  ``now_ns`` takes the same
    value every clock as a plain ``now_ns + whole + carry`` counter; ``step_ns`` is ``now_ns``'s next increment,
    ``now_hi_minus1`` the high half of ``now_ns`` minus one (both for compares split at 32 bits).
    """

    def __init__(self, clk_period_ps: int, init_ns: int = 0) -> None:
        if clk_period_ps <= 0:
            raise HwParamError(f"clk_period_ps must be > 0, not {clk_period_ps}")
        if not 0 <= init_ns < 1 << TIME_BITS:
            raise HwParamError(f"init_ns must be in 0..2**{TIME_BITS}-1, not {init_ns}")
        self.clk_period_ps = clk_period_ps
        self.init_ns = init_ns
        super().__init__({"now_ns": Out(TIME_BITS), "step_ns": Out(range(self.clk_period_ps // 1000 + 2)),
                          "now_hi_minus1": Out(TIME_BITS - TIME_BITS // 2)})

    def elaborate(self, platform):
        m = Module()
        whole, part = divmod(self.clk_period_ps, 1000)
        half = TIME_BITS // 2
        # rem_ps is the remainder after the step now being taken, carry that step's extra ns
        rem_ps = Signal(range(1000 + part), init=part)
        carry = Signal()
        carry_next = rem_ps >= 1000 - part
        m.d.sync += [rem_ps.eq(Mux(carry_next, rem_ps + part - 1000, rem_ps + part)), carry.eq(carry_next)]
        hi_init = self.init_ns >> half
        lo, hi = Signal(half, init=self.init_ns & ((1 << half) - 1)), Signal(TIME_BITS - half, init=hi_init)
        hi_plus1 = Signal(TIME_BITS - half, init=(hi_init + 1) & ((1 << (TIME_BITS - half)) - 1))
        lo_sum = Signal(half + 1)
        m.d.comb += [self.step_ns.eq(whole + carry), lo_sum.eq(lo + self.step_ns), self.now_ns.eq(Cat(lo, hi))]
        m.d.sync += lo.eq(lo_sum[:half])
        hi_minus1 = Signal(TIME_BITS - half, init=(hi_init - 1) & ((1 << (TIME_BITS - half)) - 1))
        m.d.comb += self.now_hi_minus1.eq(hi_minus1)
        with m.If(lo_sum[half]):
            m.d.sync += [hi.eq(hi_plus1), hi_plus1.eq(hi_plus1 + 1), hi_minus1.eq(hi)]
        return m
