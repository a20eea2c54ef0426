"""RoCEv2 ICRC checker and generator at full data width: one beat per clock, CRC-32 from ``amaranth.lib.crc``.

The invariant CRC (IBTA A17.3.3; golden model ``sw.roce.wire.icrc``) runs over 8 bytes of 1s, then the IP header,
UDP, BTH and payload with the router-mutable fields forced to 1s: IPv4 TOS, TTL and header checksum, or IPv6
traffic class, flow label and hop limit; the UDP checksum; the BTH resv8a byte.  Frames are Ethernet II,
optionally with one 802.1Q tag (TPID 0x8100), then IPv4 without options (IHL 5) or IPv6 with UDP as next
header.  Which bytes are masked follows from the TPID and the IP version nibble, both seen no later than the
bytes they govern.

Pipeline (``_IcrcCore``), all stages advance together on ``en`` so a stalled generator keeps its alignment:

1. mask: Ethernet header bytes and bytes beyond ``tkeep`` become 0, mutable fields 1s; the number of missing
   lanes ``k`` is decoded from the (contiguous) ``tkeep`` of the beat;
2. partial sums: the 32 outputs of the data matrix ``G`` (CRC-32 of one beat) as XORs of <= 36 bits each,
   registered (two LUT6 levels); the 8 bytes of 1s enter as a constant injected on the beat holding the first
   IP byte (the CRC state is 0 over the zeroed Ethernet header, so no start value depends on the VLAN tag);
3. state: ``S' = F*S ^ sum(partials)``, cleared after each last beat, the only loop (~31-input XORs);
4. rewind: a partial last beat was run with its ``k`` missing bytes as zeros; ``Z^-k`` (``Z`` = one zero
   byte) undoes them, two bits of ``k`` per registered stage.

The result is the raw CRC register after the frame: the CRC-32 residue iff a frame ending in its ICRC is good
(checker), or the ICRC to append (generator).
"""

from __future__ import annotations

from functools import cache

from amaranth.hdl import Cat, Const, Elaboratable, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.crc import Algorithm, Parameters, catalog
from amaranth.lib.wiring import In, Out

from hw.errors import HwParamError
from hw.int_ack import DSCP_INT
from hw.lib.stream import AxiStream, tap_head
from hw.parser import ETH_BYTES, ETHERTYPE_IPV4, TPID_8021Q, VLAN_TAG_BYTES

ICRC_BYTES = 4
CRC_BITS = 32
XOR_CHUNK = 36  # inputs per registered partial sum: two levels of 6-input LUTs
PSEUDO_LRH_BYTES = 8


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


def _mat_pow(a: list[int], n: int) -> list[int]:
    out = [1 << j for j in range(CRC_BITS)]
    for _ in range(n):
        out = _mat_mul(a, out)
    return out


def reflect32(v: int) -> int:
    """Bit-reverse a 32-bit value (the raw CRC register holds the Ethernet CRC bit-reversed)."""
    return int(f"{v:032b}"[::-1], 2)


def _xor_tree(cols: list[int], bits) -> list:
    """Output bit i = XOR of the input bits j whose column has bit i set."""
    outs = []
    for i in range(CRC_BITS):
        terms = [bits[j] for j, col in enumerate(cols) if col >> i & 1]
        outs.append(Cat(*terms).xor() if terms else Const(0, 1))
    return outs


@cache
def mask_plan(max_offset: int = 80) -> dict[int, dict[tuple[bool, bool], str]]:
    """Per frame byte offset and (802.1Q tagged, IPv6): "zero" (Ethernet header), "ones" or "lo" (low nibble
    forced to 1s, the IPv6 traffic class in byte 0); offsets absent are used as they are."""
    plan: dict[int, dict[tuple[bool, bool], str]] = {}
    for vlan in (False, True):
        l3 = ETH_BYTES + (VLAN_TAG_BYTES if vlan else 0)
        for v6 in (False, True):
            marks = dict.fromkeys(range(l3), "zero")
            if v6:
                udp = l3 + 40
                marks[l3] = "lo"
                marks.update(dict.fromkeys((l3 + 1, l3 + 2, l3 + 3, l3 + 7), "ones"))
            else:
                udp = l3 + 20
                marks.update(dict.fromkeys((l3 + 1, l3 + 8, l3 + 10, l3 + 11), "ones"))
            marks.update(dict.fromkeys((udp + 6, udp + 7, udp + 8 + 4), "ones"))
            for off, kind in marks.items():
                assert off < max_offset
                plan.setdefault(off, {})[(vlan, v6)] = kind
    return plan


def _lg(n: int) -> int:
    return (n - 1).bit_length()


REWIND_BITS_PER_STAGE = 2


def core_latency(data_width: int) -> int:
    """Clocks from a frame's last beat to its CRC: mask, partial sums, state, then the rewind stages."""
    return 3 + -(-_lg(data_width // 8) // REWIND_BITS_PER_STAGE)


class _IcrcCore(Elaboratable):
    """The CRC pipeline shared by checker and generator: beats in, raw CRC register of each frame out
    ``latency`` enabled clocks after its last beat (``res_valid`` for one enabled clock)."""

    def __init__(self, data_width: int) -> None:
        self.w, self.bpb = data_width, data_width // 8
        self.lg = _lg(self.bpb)
        self.rewind_stages = -(-self.lg // REWIND_BITS_PER_STAGE)
        self.latency = core_latency(data_width)
        self.en = Signal(init=1)
        self.valid = Signal()
        self.data = Signal(data_width)
        self.keep = Signal(self.bpb)
        self.last = Signal()
        self.res_valid = Signal()
        self.res = Signal(CRC_BITS)

    def _flags(self, m: Module, beat: Signal):
        """(tagged, IPv6) as seen on the current beat: from its own bytes, else from bytes captured earlier."""
        bpb = self.bpb

        def eff(q: int):
            lane = q % bpb
            cur = self.data[8 * lane:8 * lane + 8]
            cap = Signal(8, name=f"cap{q}")
            with m.If(self.en & self.valid & (beat == q // bpb)):
                m.d.sync += cap.eq(cur)
            return Mux(beat == q // bpb, cur, cap)

        vlan = Signal()
        v6 = Signal()
        m.d.comb += vlan.eq(Cat(eff(13), eff(12)) == TPID_8021Q)
        m.d.comb += v6.eq(Mux(vlan, eff(ETH_BYTES + VLAN_TAG_BYTES)[4:], eff(ETH_BYTES)[4:]) == 6)
        return vlan, v6

    def elaborate(self, platform):
        m = Module()
        w, bpb, lg = self.w, self.bpb, self.lg
        en = self.en
        plan = mask_plan()
        hdr_beats = max(plan) // bpb + 1
        beat = Signal(range(hdr_beats + 1))
        with m.If(en & self.valid):
            with m.If(self.last):
                m.d.sync += beat.eq(0)
            with m.Elif(beat < hdr_beats):
                m.d.sync += beat.eq(beat + 1)
        vlan, v6 = self._flags(m, beat)
        cases = [(False, False), (False, True), (True, False), (True, True)]
        case_sig = {c: (vlan if c[0] else ~vlan) & (v6 if c[1] else ~v6) for c in cases}

        # stage 1: masked beat, missing-lane count k, where the pseudo-LRH constant enters
        md1 = Signal(w)
        k1 = Signal(lg)
        v1, last1 = Signal(), Signal()
        inj1 = Signal(2)  # [untagged, tagged]: this beat holds the first IP byte
        lanes = []
        for lane in range(bpb):
            byte = self.data[8 * lane:8 * lane + 8]
            conds: dict[str, list] = {"zero": [], "ones": [], "lo": []}
            for b in range(hdr_beats):
                marks = plan.get(b * bpb + lane)
                if not marks:
                    continue
                for kind in conds:
                    hit = [case_sig[c] for c in cases if marks.get(c) == kind]
                    if len(hit) == 4:
                        conds[kind].append(beat == b)
                    elif hit:
                        conds[kind].append((beat == b) & Cat(*hit).any())
            zero = ~self.keep[lane]
            if conds["zero"]:
                zero = zero | Cat(*conds["zero"]).any()
            val = byte & Cat(*([~zero] * 8))
            if conds["ones"]:
                val = val | Cat(*([self.keep[lane] & Cat(*conds["ones"]).any()] * 8))
            if conds["lo"]:
                lo = self.keep[lane] & Cat(*conds["lo"]).any()
                val = val | Cat(*([lo] * 4), Const(0, 4))
            lanes.append(val)
        # k = lanes missing from a contiguous tkeep = bitwise NOT of (index of the last kept lane)
        last_lane = [self.keep[i] & ~self.keep[i + 1] for i in range(bpb - 1)] + [self.keep[bpb - 1]]
        k_now = Cat(*[~Cat(*[last_lane[i] for i in range(bpb) if i >> b & 1]).any() for b in range(lg)])
        with m.If(en):
            m.d.sync += [md1.eq(Cat(*lanes)), k1.eq(k_now), v1.eq(self.valid), last1.eq(self.last),
                         inj1.eq(Cat((beat == ETH_BYTES // bpb) & ~vlan,
                                     (beat == (ETH_BYTES + VLAN_TAG_BYTES) // bpb) & vlan))]

        # stage 2: registered partial sums of G*md1 plus the pseudo-LRH injection
        f_cols, g_cols = _matrices(w)
        z_cols = _matrices(8)[0]
        s_ff = _advance(catalog.CRC32_ETHERNET.initial_crc, (1 << 8 * PSEUDO_LRH_BYTES) - 1, 8 * PSEUDO_LRH_BYTES)
        inject = []
        for vl in (False, True):  # state of the 1s advanced over the rest of the beat holding the IP start
            l3 = ETH_BYTES + (VLAN_TAG_BYTES if vl else 0)
            inject.append(_mat_apply(_mat_pow(z_cols, bpb - l3 % bpb), s_ff))
        parts2: list[list[Signal]] = []
        for i in range(CRC_BITS):
            terms = [md1[j] for j, col in enumerate(g_cols) if col >> i & 1]
            terms += [inj1[t] for t in range(2) if inject[t] >> i & 1]
            regs = []
            for c in range(0, len(terms), XOR_CHUNK):
                r = Signal(name=f"p{i}_{c // XOR_CHUNK}")
                with m.If(en):
                    m.d.sync += r.eq(Cat(*terms[c:c + XOR_CHUNK]).xor())
                regs.append(r)
            parts2.append(regs)
        k2 = Signal(lg)
        v2, last2 = Signal(), Signal()
        with m.If(en):
            m.d.sync += [k2.eq(k1), v2.eq(v1), last2.eq(last1)]

        # stage 3: the state loop; the frame's last beat goes to the rewind pipeline instead
        state = Signal(CRC_BITS)
        fs = _xor_tree(f_cols, state)
        nxt = Signal(CRC_BITS)
        m.d.comb += nxt.eq(Cat(*[Cat(fs[i], *parts2[i]).xor() for i in range(CRC_BITS)]))
        with m.If(en & v2):
            m.d.sync += state.eq(Mux(last2, 0, nxt))
        tail = Signal(CRC_BITS)
        k3 = Signal(lg)
        v3 = Signal()
        with m.If(en):
            m.d.sync += [tail.eq(nxt), k3.eq(k2), v3.eq(v2 & last2)]

        # rewind stages: REWIND_BITS_PER_STAGE bits of k each, a mux over the products of Z^-(2^b)
        z_inv = _mat_inverse(z_cols)
        powers = [z_inv]
        for _ in range(lg - 1):
            powers.append(_mat_mul(powers[-1], powers[-1]))
        cur, kcur, vcur = tail, k3, v3
        for s in range(self.rewind_stages):
            bits = list(range(s * REWIND_BITS_PER_STAGE, min(lg, (s + 1) * REWIND_BITS_PER_STAGE)))
            options = []
            for sel in range(1 << len(bits)):
                mat = [1 << j for j in range(CRC_BITS)]
                for t, b in enumerate(bits):
                    if sel >> t & 1:
                        mat = _mat_mul(powers[b], mat)
                options.append(Cat(*_xor_tree(mat, cur)))
            sel_sig = Cat(*[kcur[b] for b in bits])
            out = Signal(CRC_BITS, name=f"rewind{s}")
            kout = Signal(lg, name=f"rewind{s}_k")
            vout = Signal(name=f"rewind{s}_v")
            with m.If(en):
                with m.Switch(sel_sig):
                    for sel, opt in enumerate(options):
                        with m.Case(sel):
                            m.d.sync += out.eq(opt)
                m.d.sync += [kout.eq(kcur), vout.eq(vcur)]
            cur, kcur, vcur = out, kout, vout
        m.d.comb += [self.res.eq(cur), self.res_valid.eq(vcur)]
        return m


def _check_width(data_width: int) -> None:
    if data_width < 64 or data_width % 64 or data_width & (data_width - 1):
        raise HwParamError(f"data_width must be a power of two >= 64, not {data_width}")


class IcrcChecker(wiring.Component):
    """Pass-through tap on RoCEv2 frames (IPv4/IPv6, optional 802.1Q tag) ending in their ICRC: ``done``
    pulses per frame with ``ok``, ``latency`` clocks after the frame's last beat.

    ``int_md`` (with ``done``): the frame is untagged IPv4 with DSCP ``DSCP_INT``, i.e. carries an INT stack
    between UDP and BTH (``sw.roce.wire.int_md``); its ICRC covers the frame with the stack stripped, so ``ok`` does
    not apply to it.
    """

    def __init__(self, *, data_width: int = 1024) -> None:
        _check_width(data_width)
        self.data_width = data_width
        self.latency = core_latency(data_width) + 1
        super().__init__({
            "s_axis": In(AxiStream(data_width)),
            "m_axis": Out(AxiStream(data_width)),
            "done": Out(1),
            "ok": Out(1),
            "int_md": Out(1),
            "good_frames": Out(32),
            "bad_frames": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        s = self.s_axis
        tap = tap_head(m, s, self.m_axis, ETH_BYTES + 2, self.data_width)
        m.submodules.core = core = _IcrcCore(self.data_width)
        m.d.comb += [core.valid.eq(s.tvalid & s.tready), core.data.eq(s.tdata), core.keep.eq(s.tkeep),
                     core.last.eq(s.tlast)]
        residue_raw = reflect32(Parameters(catalog.CRC32_ETHERNET, 8).residue())
        good = core.res == residue_raw
        # the clock after a last beat the head is the frame's; carried along to the verdict
        int_md = Signal()
        m.d.comb += int_md.eq((tap.be(ETH_BYTES - 2, 2) == ETHERTYPE_IPV4) & (tap.hdr[ETH_BYTES + 1][2:] == DSCP_INT)
                              & tap.got[ETH_BYTES + 1])
        for stage in range(self.latency - 1):
            nxt = Signal(name=f"int_md{stage}")
            m.d.sync += nxt.eq(int_md)
            int_md = nxt
        m.d.comb += self.int_md.eq(int_md)
        m.d.sync += [self.done.eq(core.res_valid), self.ok.eq(good)]
        with m.If(core.res_valid):
            with m.If(good):
                m.d.sync += self.good_frames.eq(self.good_frames + 1)
            with m.Else():
                m.d.sync += self.bad_frames.eq(self.bad_frames + 1)
        return m


class IcrcGenerator(wiring.Component):
    """Appends the ICRC to each RoCEv2 frame (IPv4/IPv6, optional 802.1Q tag) at one beat per clock.

    Input frames end where the ICRC goes: their IP and UDP lengths already count the 4 ICRC bytes.  The ICRC
    (least significant byte first, ``sw.roce.wire.icrc``) goes after the last byte; when fewer than 4 lanes
    are free it spills into one extra beat, for which the input is held one clock.
    ``tkeep`` must be contiguous from lane 0 (AXI-Stream packed frames).  ``tuser`` (``user_width`` bits) goes
    along with each beat (a spill beat repeats its frame's).
    """

    def __init__(self, *, data_width: int = 1024, user_width: int = 0) -> None:
        _check_width(data_width)
        self.data_width = data_width
        self.user_width = user_width
        self.latency = core_latency(data_width)
        super().__init__({
            "s_axis": In(AxiStream(data_width, user_width)),
            "m_axis": Out(AxiStream(data_width, user_width)),
            "frames": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        w, bpb = self.data_width, self.data_width // 8
        s, o = self.s_axis, self.m_axis
        m.submodules.core = core = _IcrcCore(w)
        adv = Signal()  # every pipeline stage (core and data delay line) moves on together
        m.d.comb += [core.en.eq(adv), core.valid.eq(s.tvalid & adv), core.data.eq(s.tdata),
                     core.keep.eq(s.tkeep), core.last.eq(s.tlast), s.tready.eq(adv)]
        dv, dd, dk, dl = s.tvalid, s.tdata, s.tkeep, s.tlast
        du = s.tuser if self.user_width else None
        for stage in range(core.latency):
            nv, nd = Signal(name=f"d{stage}_v"), Signal(w, name=f"d{stage}_data")
            nk, nl = Signal(bpb, name=f"d{stage}_keep"), Signal(name=f"d{stage}_last")
            with m.If(adv):
                m.d.sync += [nv.eq(dv), nd.eq(dd), nk.eq(dk), nl.eq(dl)]
                if du is not None:
                    nu = Signal(self.user_width, name=f"d{stage}_user")
                    m.d.sync += nu.eq(du)
                    du = nu
            dv, dd, dk, dl = nv, nd, nk, nl
        if du is not None:
            m.d.comb += o.tuser.eq(du)

        # the ICRC value on the wire: reflected raw register, inverted; byte j in lane (n + j) mod bpb
        icrc = ~Cat(*reversed(list(core.res)))
        icrc_byte = [icrc[8 * j:8 * j + 8] for j in range(ICRC_BYTES)]
        spill = dk[bpb - ICRC_BYTES]  # n > bpb - 4: the ICRC does not fit after the last byte
        extra = Signal()  # the extra beat of a spilled ICRC is on the output
        hold = dv & dl & spill & ~extra
        m.d.comb += adv.eq(~dv | (o.tready & ~hold))
        with m.If(dv & o.tready & dl & spill):
            m.d.sync += extra.eq(~extra)

        def at_lane(lane: int, j: int, shift: int):
            """ICRC byte j lands in ``lane`` iff the last data lane is ``lane + shift - j - 1``."""
            n = lane + shift - j  # kept lanes needed
            if not 1 <= n <= bpb:
                return None
            return dk[n - 1] & ~dk[n] if n < bpb else dk[n - 1]

        data_lanes, keep_lanes = [], []
        for lane in range(bpb):
            byte = dd[8 * lane:8 * lane + 8] & Cat(*([~extra] * 8))
            kept = dk[lane] & ~extra
            for j in range(ICRC_BYTES):
                here = at_lane(lane, j, 0)
                over = at_lane(lane, j, bpb)
                sel = []
                if here is not None:
                    sel.append(~extra & here)
                if over is not None:
                    sel.append(extra & over)
                if sel:
                    put = dl & Cat(*sel).any()
                    byte = byte | (icrc_byte[j] & Cat(*([put] * 8)))
                    kept = kept | put
            data_lanes.append(byte)
            keep_lanes.append(kept)
        m.d.comb += [o.tvalid.eq(dv), o.tdata.eq(Cat(*data_lanes)), o.tkeep.eq(Cat(*keep_lanes)),
                     o.tlast.eq(dl & (extra | ~spill))]
        with m.If(o.tvalid & o.tready & o.tlast):
            m.d.sync += self.frames.eq(self.frames + 1)
        return m
