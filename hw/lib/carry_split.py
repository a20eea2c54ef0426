"""Wide adds and compares split into carry chains of ``chunk_bits``, one chunk per clock (400 MHz timing).

Each chunk's result and carry out are registered; chunk j uses chunk j-1's registered carry, so the result is
exact ``ceil(W / chunk_bits)`` clocks after the inputs last changed, and stays so while they hold.  The longest
path is one chunk's chain instead of the whole width.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Signal


def n_chunks(width: int, chunk_bits: int) -> int:
    """Clocks a split add of ``width`` bits needs to settle (``chunk_bits`` 0: one chunk)."""
    return -(-width // chunk_bits) if chunk_bits else 1


def settled_add(m: Module, a, b, width: int, chunk_bits: int, subtract: bool = False) -> Signal:
    """``(a + b) mod 2^width`` (``a - b`` with ``subtract``), registered chunk by chunk (module docstring)."""
    chunk_bits = chunk_bits or width
    n_ch = n_chunks(width, chunk_bits)
    a_w, b_w = Signal(n_ch * chunk_bits), Signal(n_ch * chunk_bits)
    m.d.comb += [a_w.eq(a), b_w.eq(b)]
    carry = Signal(n_ch)
    parts = []
    for j in range(n_ch):
        lo, hi = j * chunk_bits, (j + 1) * chunk_bits
        s_j = Signal(chunk_bits + 1)
        r_j = Signal(chunk_bits)
        # a - b - borrow as a + ~b + carry (carry = no borrow): one chain with a carry-in, no second adder
        c_in = carry[j - 1] if j else int(subtract)
        b_j = (~b_w[lo:hi])[:chunk_bits] if subtract else b_w[lo:hi]
        m.d.comb += s_j.eq(a_w[lo:hi] + b_j + c_in)
        m.d.sync += [r_j.eq(s_j[:chunk_bits]), carry[j].eq(s_j[chunk_bits])]
        parts.append(r_j)
    result = Signal(width)
    m.d.comb += result.eq(Cat(*parts))
    return result


def settled_gt(m: Module, a, b, chunk_bits: int):
    """``a > b``, registered, exact ``ceil(W / chunk_bits)`` clocks after the inputs last changed (0: comb)."""
    if not chunk_bits:
        return a > b
    width = max(len(a), len(b))
    n_ch = n_chunks(width, chunk_bits)
    a_w, b_w = Signal(n_ch * chunk_bits), Signal(n_ch * chunk_bits)
    m.d.comb += [a_w.eq(a), b_w.eq(b)]
    carry = Signal(n_ch)          # b - a without borrow so far, as b + ~a + carry
    for j in range(n_ch):
        lo, hi = j * chunk_bits, (j + 1) * chunk_bits
        d_j = Signal(chunk_bits + 1)
        m.d.comb += d_j.eq(b_w[lo:hi] + (~a_w[lo:hi])[:chunk_bits] + (carry[j - 1] if j else 1))
        m.d.sync += carry[j].eq(d_j[chunk_bits])
    return ~carry[n_ch - 1]


A_PIECE_BITS, B_PIECE_BITS = 17, 24   # unsigned operand slices one DSP48E2 multiplies (27 x 18 signed)


def settled_mul(m: Module, a, b, chunk_bits: int) -> tuple[Signal, int]:
    """``a * b`` as registered DSP-sized partial products summed by split adds; returns (product, clocks): the
    product is exact ``clocks`` clocks after the operands last changed.  ``b`` may be a constant."""
    b_bits = len(b) if not isinstance(b, int) else max(1, b.bit_length())
    width = len(a) + b_bits
    a_pieces = [a[i:i + A_PIECE_BITS] for i in range(0, len(a), A_PIECE_BITS)]
    b_offsets = list(range(0, b_bits, B_PIECE_BITS))
    rows: dict[tuple[int, int], list] = {}
    for i, a_i in enumerate(a_pieces):
        for j, off in enumerate(b_offsets):
            b_j = (b >> off) & ((1 << B_PIECE_BITS) - 1) if isinstance(b, int) else b[off:off + B_PIECE_BITS]
            p = Signal(A_PIECE_BITS + B_PIECE_BITS, name=f"pp{i}_{j}")
            m.d.sync += p.eq(a_i * b_j)
            rows.setdefault((i, j % 2), []).append((i * A_PIECE_BITS + off, p))
    # a row's products are 2 * B_PIECE_BITS apart and narrower than that: a concatenation, no adder
    operands = []
    for parts in rows.values():
        row = Signal(width)
        m.d.comb += row.eq(sum_disjoint(parts))
        operands.append(row)
    layers = 0
    while len(operands) > 1:
        nxt = [settled_add(m, operands[k], operands[k + 1], width, chunk_bits) for k in range(0, len(operands) - 1, 2)]
        operands = nxt + ([operands[-1]] if len(operands) % 2 else [])
        layers += 1
    # each layer registers chunk j one clock after its inputs' chunk j: n_chunks + layers - 1 after the products
    return operands[0], 1 + (n_chunks(width, chunk_bits) + layers - 1 if layers else 0)


def sum_disjoint(parts: list):
    """``sum(p << shift)`` for (shift, p) whose bit ranges do not overlap: one concatenation."""
    pieces, at = [], 0
    for shift, p in sorted(parts, key=lambda x: x[0]):
        if shift > at:
            pieces.append(Const(0, shift - at))
        pieces.append(p)
        at = shift + len(p)
    return Cat(*pieces)


def mul_clocks(a_bits: int, b_bits: int, chunk_bits: int) -> int:
    """The ``clocks`` ``settled_mul`` returns for an ``a_bits`` x ``b_bits`` product."""
    rows = -(-a_bits // A_PIECE_BITS) * min(2, -(-b_bits // B_PIECE_BITS))
    layers = (rows - 1).bit_length()
    return 1 + (n_chunks(a_bits + b_bits, chunk_bits) + layers - 1 if layers else 0)
