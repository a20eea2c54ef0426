"""AXI-Stream as an Amaranth signature: tdata/tkeep/tlast/tvalid/tready and an optional tuser.

Verilog ports come out as ``<name>__tdata`` etc., so cocotbext-axi binds them with the prefix ``<name>_``.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth.hdl import Cat, Module, Signal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError


class AxiStream(wiring.Signature):
    """AXI4-Stream source-side signature: ``Out(AxiStream(w))`` on a producer, ``In(...)`` on a consumer."""

    def __init__(self, data_width: int, user_width: int = 0) -> None:
        if data_width <= 0 or data_width % 8:
            raise HwParamError(f"data_width must be a positive multiple of 8, not {data_width}")
        if user_width < 0:
            raise HwParamError(f"user_width must be >= 0, not {user_width}")
        self.data_width = data_width
        self.user_width = user_width
        members = {
            "tdata": Out(data_width),
            "tkeep": Out(data_width // 8),
            "tlast": Out(1),
            "tvalid": Out(1),
            "tready": In(1),
        }
        if user_width:
            members["tuser"] = Out(user_width)
        super().__init__(members)

    @property
    def bytes_per_beat(self) -> int:
        return self.data_width // 8

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, AxiStream) and other.data_width == self.data_width
                and other.user_width == self.user_width)

    def __hash__(self) -> int:
        return hash((AxiStream, self.data_width, self.user_width))

    def __repr__(self) -> str:
        return f"AxiStream({self.data_width}, user_width={self.user_width})"


def keep_for_remaining(remaining_bytes, bytes_per_beat: int):
    """tkeep for a beat when ``remaining_bytes`` (a Value) of the frame are still to go: lane i iff i < rem."""
    return Cat(*(remaining_bytes > lane for lane in range(bytes_per_beat)))


def tap_qp_bits(data_width: int, n_qps: int) -> int:
    """Check a parser tap's sizes (one-line errors) and return the QP field width it emits."""
    if data_width <= 0 or data_width % 8:
        raise HwParamError(f"data_width must be a positive multiple of 8, not {data_width}")
    if n_qps < 2 or n_qps & (n_qps - 1) or n_qps > 1 << 24:
        raise HwParamError(f"n_qps must be a power of two in 2..2^24, not {n_qps}")
    return (n_qps - 1).bit_length()


@dataclass
class HeadTap:
    """A frame's first bytes captured by ``tap_head``: ``hdr[i]`` (byte i) and ``got[i]`` (present, by tkeep)."""

    fire: Value
    hdr: list[Signal]
    got: list[Signal]

    def be(self, offset: int, n: int) -> Value:
        """Big-endian field of ``n`` captured bytes at ``offset``."""
        return Cat(*reversed(self.hdr[offset:offset + n]))


def tap_head(m: Module, s, o, n_bytes: int, data_width: int) -> HeadTap:
    """Pass stream ``s`` through to ``o`` unchanged and capture each frame's first ``n_bytes`` (a parser's view).

    A byte of a later beat reads as absent (``got`` 0) until its beat arrives, so a short frame never shows the
    previous frame's bytes; the captured head is complete the clock after the beat that carried it.
    """
    bpb = data_width // 8
    m.d.comb += [o.tdata.eq(s.tdata), o.tkeep.eq(s.tkeep), o.tlast.eq(s.tlast), o.tvalid.eq(s.tvalid),
                 s.tready.eq(o.tready)]
    fire = s.tvalid & s.tready
    last_beat = (n_bytes - 1) // bpb
    beat = Signal(range(last_beat + 2))
    hdr = [Signal(8, name=f"hdr{i}") for i in range(n_bytes)]
    got = [Signal(name=f"got{i}") for i in range(n_bytes)]
    with m.If(fire):
        with m.If(s.tlast):
            m.d.sync += beat.eq(0)
        with m.Elif(beat <= last_beat):
            m.d.sync += beat.eq(beat + 1)
        for i in range(n_bytes):
            if i // bpb:
                with m.If(beat == 0):  # a new frame: forget bytes of later beats until they arrive
                    m.d.sync += got[i].eq(0)
            with m.If(beat == i // bpb):
                lane = i % bpb
                m.d.sync += [hdr[i].eq(s.tdata[8 * lane:8 * lane + 8]), got[i].eq(s.tkeep[lane])]
    return HeadTap(fire, hdr, got)


class SkidBuffer(wiring.Component):
    """A two-entry register slice on a valid/ready stream of ``width`` bits: ``ready`` upstream and ``valid``/``data``
    downstream all come from flip-flops, so neither side's handshake logic reaches into the other's."""

    def __init__(self, width: int) -> None:
        if width <= 0:
            raise HwParamError(f"width must be positive, not {width}")
        super().__init__({"i_valid": In(1), "i_ready": Out(1), "i_data": In(width),
                          "o_valid": Out(1), "o_ready": In(1), "o_data": Out(width)})

    def elaborate(self, platform):
        m = Module()
        skid_v = Signal()
        skid = Signal.like(self.i_data)
        m.d.comb += self.i_ready.eq(~skid_v)
        out_free = ~self.o_valid | self.o_ready
        with m.If(out_free):
            with m.If(skid_v):   # the held word first, then the input straight to the output
                m.d.sync += [self.o_valid.eq(1), self.o_data.eq(skid), skid_v.eq(0)]
            with m.Else():
                m.d.sync += [self.o_valid.eq(self.i_valid), self.o_data.eq(self.i_data)]
        with m.Elif(self.i_valid & ~skid_v):   # output stalled: the word taken this clock waits in the skid
            m.d.sync += [skid_v.eq(1), skid.eq(self.i_data)]
        return m
