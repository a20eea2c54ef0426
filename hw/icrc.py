"""RoCEv2 ICRC checker at full data width: one beat per clock, CRC-32 from ``amaranth.lib.crc``'s catalog.

The invariant CRC (IBTA A17.3.3; see ``sw.roce.icrc``) runs over 8 bytes of 1s, then the IPv4 header, UDP,
BTH and payload with TOS, TTL, IP checksum, UDP checksum and BTH resv8a forced to 1s.  Per beat the 32-bit
state advances by ``F*S ^ G*D`` (matrices derived from ``amaranth.lib.crc.Parameters`` at elaboration); the
Ethernet header is zeroed and cancelled by a pre-rewound initial state, and a partial last beat is processed
with its missing bytes as zeros and then rewound by ``Z^-k`` (Z = one zero byte), so no byte shifter is
needed.  Running the CRC over the frame *including* its ICRC leaves the CRC-32 residue iff the ICRC is good.
"""

from __future__ import annotations

from functools import cache

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.crc import Algorithm, Parameters, catalog
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from hw.stream import AxiStream

ETH_BYTES = 14
# frame byte offsets forced to 0xFF: IPv4 TOS, TTL, header checksum; UDP checksum; BTH resv8a
MASKED_OFFSETS = (15, 22, 24, 25, 40, 41, 46)
CRC_BITS = 32


def _advance(state: int, data: int, data_width: int) -> int:
    """Raw CRC-32 (Ethernet) state after one ``data_width`` word from raw state ``state`` (no output
    reflection or XOR, so the result is the state register itself)."""
    eth = catalog.CRC32_ETHERNET
    raw = Algorithm(crc_width=eth.crc_width, polynomial=eth.polynomial, initial_crc=state,
                    reflect_input=eth.reflect_input, reflect_output=False, xor_output=0)
    return raw(data_width).compute([data])


@cache
def _matrices(data_width: int) -> tuple[list[int], list[int]]:
    """Columns of F (state bit j -> new state) and G (data bit i -> new state) for one ``data_width`` word."""
    f = [_advance(1 << j, 0, data_width) for j in range(CRC_BITS)]
    g = [_advance(0, 1 << i, data_width) for i in range(data_width)]
    return f, g


def _mat_apply(cols: list[int], vec: int) -> int:
    out = 0
    for j, col in enumerate(cols):
        if vec >> j & 1:
            out ^= col
    return out


def _mat_inverse(cols: list[int]) -> list[int]:
    """Inverse over GF(2) of a 32x32 matrix given by columns (Gauss-Jordan on the rows of [A | I])."""
    rows = [(sum(((cols[j] >> i) & 1) << j for j in range(CRC_BITS)), 1 << i) for i in range(CRC_BITS)]
    for c in range(CRC_BITS):
        pivot = next(r for r in range(c, CRC_BITS) if rows[r][0] >> c & 1)
        rows[c], rows[pivot] = rows[pivot], rows[c]
        for r in range(CRC_BITS):
            if r != c and rows[r][0] >> c & 1:
                rows[r] = (rows[r][0] ^ rows[c][0], rows[r][1] ^ rows[c][1])
    inv_rows = [rows[i][1] for i in range(CRC_BITS)]
    return [sum(((inv_rows[i] >> j) & 1) << i for i in range(CRC_BITS)) for j in range(CRC_BITS)]


def _mat_mul(a: list[int], b: list[int]) -> list[int]:
    return [_mat_apply(a, col) for col in b]


def _reflect32(v: int) -> int:
    return int(f"{v:032b}"[::-1], 2)


def _xor_tree(cols: list[int], bits) -> list:
    """Output bit i = XOR of the input bits j whose column has bit i set."""
    outs = []
    for i in range(CRC_BITS):
        terms = [bits[j] for j, col in enumerate(cols) if col >> i & 1]
        outs.append(Cat(*terms).xor() if terms else Const(0, 1))
    return outs


class IcrcChecker(wiring.Component):
    """Pass-through tap on RoCEv2/IPv4 frames ending in their ICRC: ``done`` pulses per frame with ``ok``."""

    def __init__(self, *, data_width: int = 1024) -> None:
        if data_width < 64 or data_width % 64 or data_width & (data_width - 1):
            raise HwParamError(f"data_width must be a power of two >= 64, not {data_width}")
        self.data_width = data_width
        super().__init__({
            "s_axis": In(AxiStream(data_width)),
            "m_axis": Out(AxiStream(data_width)),
            "done": Out(1),
            "ok": Out(1),
            "good_frames": Out(32),
            "bad_frames": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        w, bpb = self.data_width, self.data_width // 8
        s, o = self.s_axis, self.m_axis
        m.d.comb += [o.tdata.eq(s.tdata), o.tkeep.eq(s.tkeep), o.tlast.eq(s.tlast), o.tvalid.eq(s.tvalid),
                     s.tready.eq(o.tready)]
        fire = s.tvalid & s.tready

        f_cols, g_cols = _matrices(w)
        z_cols = _matrices(8)[0]
        z_inv = _mat_inverse(z_cols)
        s_ff = _advance(catalog.CRC32_ETHERNET.initial_crc, 0xFFFF_FFFF_FFFF_FFFF, 64)
        rewind = z_inv
        for _ in range(ETH_BYTES - 1):
            rewind = _mat_mul(z_inv, rewind)
        init = _mat_apply(rewind, s_ff)
        residue_raw = _reflect32(Parameters(catalog.CRC32_ETHERNET, 8).residue())

        hdr_beats = (max(MASKED_OFFSETS) // bpb) + 1
        beat = Signal(range(hdr_beats + 1))
        with m.If(fire):
            with m.If(s.tlast):
                m.d.sync += beat.eq(0)
            with m.Elif(beat < hdr_beats):
                m.d.sync += beat.eq(beat + 1)

        # the beat as the CRC sees it: Ethernet header zeroed, mutable fields 1s, bytes beyond tkeep zeroed
        lanes = []
        for lane in range(bpb):
            byte = s.tdata[8 * lane:8 * lane + 8]
            val = Signal(8, name=f"lane{lane}")
            m.d.comb += val.eq(byte & Cat(*([s.tkeep[lane]] * 8)))
            for b in range(hdr_beats):
                off = b * bpb + lane
                if off < ETH_BYTES:
                    with m.If(beat == b):
                        m.d.comb += val.eq(0)
                elif off in MASKED_OFFSETS:
                    with m.If(beat == b):
                        m.d.comb += val.eq(0xFF)
            lanes.append(val)
        data = Cat(*lanes)

        state = Signal(CRC_BITS, init=init)
        cur = Signal(CRC_BITS)
        # a plain Mux, not If/else: Icarus never runs a Verilog always-block whose inputs have not changed
        m.d.comb += cur.eq(Mux(beat == 0, init, state))
        nxt = Signal(CRC_BITS)
        m.d.comb += nxt.eq(Cat(*[a ^ b for a, b in zip(_xor_tree(f_cols, cur), _xor_tree(g_cols, data),
                                                          strict=True)]))
        with m.If(fire):
            m.d.sync += state.eq(nxt)

        # last beat: rewind over the k = (lanes not kept) zero bytes, one stage per bit of k
        n_keep = Signal(range(bpb + 1))
        m.d.comb += n_keep.eq(sum(s.tkeep[i] for i in range(bpb)))
        k = Signal(range(bpb))
        m.d.comb += k.eq(bpb - n_keep)
        stage_in = nxt
        power = z_inv
        for b in range((bpb - 1).bit_length()):
            stage_out = Signal(CRC_BITS, name=f"rewind{b}")
            rewound = Cat(*_xor_tree(power, stage_in))
            m.d.comb += stage_out.eq(stage_in)
            with m.If(k[b]):
                m.d.comb += stage_out.eq(rewound)
            stage_in = stage_out
            power = _mat_mul(power, power)
        good = stage_in == residue_raw
        m.d.sync += [self.done.eq(fire & s.tlast), self.ok.eq(good)]
        with m.If(fire & s.tlast):
            with m.If(good):
                m.d.sync += self.good_frames.eq(self.good_frames + 1)
            with m.Else():
                m.d.sync += self.bad_frames.eq(self.bad_frames + 1)
        return m
