"""Golden replay of the RTL NIC's DCQCN in a ``hil run``: the CNP arrival clocks the bridge recorded, fed to the one
golden model ``sw.cc.DcqcnRp`` (the parameters the driver wrote, read back from the NIC), against every QP_RATE
value the host driver read.

Time base: RTL clocks since the bridge's origin, 2.5 ns each.  The model starts at the QP_INIT write's clock and
takes each CNP at the clock its first beat entered ``rx_s_axis``; the bytes the RTL sent are fed at each read
(frames x MTU, ``on_bytes_sent``).  The RTL applies a CNP after its RX pipeline and applies a timer expiry at its
reaction point's next sweep visit, so its rate follows the model's by at most ``lag_ns`` (the sweep interval of
``n_qps`` plus the RX pipeline).  A read at ``t`` therefore matches when its value equals the limiter increment
(``sw.cc.RateToIncrement``, as the RTL converts) of the model's rate at some time in ``[t - lag_ns, t]``; the values
are compared bit for bit.  Byte-counter expiries are fed at read resolution only: a run that reaches one between
two reads can show a mismatch (never a false match).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from sw.cc import DcqcnParams, DcqcnRp, RateToIncrement

RX_PIPELINE_NS = 100        # a CNP's first beat to the reaction point's update: frame, ICRC, event FIFO, op wait


@dataclass(frozen=True)
class RateRead:
    """One QP_RATE read of the host driver: RTL clock, QP, value (limiter increment), frames sent so far."""

    cycle: int
    qp: int
    value: int
    frames_tx: int


def model_trajectory(params: DcqcnParams, init_ns: int, cnp_ns: list[int], sent_at: list[tuple[int, int]],
                     end_ns: int) -> list[tuple[int, int]]:
    """The model's current rate (kb/s) as change points ``(ns, rc_kbps)`` from ``init_ns`` to ``end_ns``: CNPs at
    ``cnp_ns``, ``(ns, bytes)`` sent, every timer expiry in between (the model's own deadlines)."""
    model = DcqcnRp(params, now_ns=init_ns)
    out = [(init_ns, model.rc_kbps)]
    events = sorted([(t, 0, 0) for t in cnp_ns if t >= init_ns] + [(t, 1, n) for t, n in sent_at if t >= init_ns])
    events.append((end_ns, 2, 0))

    def note(t: int) -> None:
        if model.rc_kbps != out[-1][1]:
            out.append((t, model.rc_kbps))

    for t, kind, n in events:
        while model.next_deadline_ns <= t:
            d = model.next_deadline_ns
            model.advance(d)
            note(d)
        if kind == 0:
            model.on_cnp(t)
        elif kind == 1:
            model.on_bytes_sent(n, t)
        else:
            model.advance(t)
        note(t)
    return out


def check_reads(traj: list[tuple[int, int]], reads: list[RateRead], *, clk_ns: float, lag_ns: int,
                conv: RateToIncrement) -> list[str]:
    """The reads whose value is not the limiter increment of the model's rate (``traj``: change points
    ``(ns, kb/s)``) at some time in ``[t - lag_ns, t]`` of the read's time ``t``, one line each."""
    times = [t for t, _ in traj]
    bad = []
    for r in reads:
        t = int(r.cycle * clk_ns)
        lo = bisect.bisect_right(times, t - lag_ns) - 1
        hi = bisect.bisect_right(times, t)
        allowed = {conv.increment(rc) for _, rc in traj[max(0, lo):hi]}
        if r.value not in allowed:
            bad.append(f"clock {r.cycle}: QP_RATE {r.value}, model {sorted(allowed)}")
    return bad


def replay(params: DcqcnParams, *, clk_ns: float, qp: int, init: tuple[int, int], cnp_cycles: list[int],
           reads: list[RateRead], mtu_bytes: int, lag_ns: int, conv: RateToIncrement) -> dict[str, Any]:
    """Compare the reads of ``qp`` after its QP_INIT (``init``: clock, frames sent then) with the model fed the same
    CNPs; the verdict and its figures (``matches``, ``compared``, ``mismatches`` (at most 5), ``model_trace``:
    (ns, rc_kbps, increment) per change)."""
    init_cycle, prev = init
    mine = [r for r in reads if r.qp == qp and r.cycle * clk_ns >= init_cycle * clk_ns + lag_ns]
    init_ns = int(init_cycle * clk_ns)
    cnp_ns = [int(c * clk_ns) for c in cnp_cycles]
    if not mine:
        return {"matches": False, "compared": 0, "mismatches": ["no QP_RATE read after QP_INIT"],
                "model_trace": [], "lag_ns": lag_ns}
    sent_at = []
    for r in mine:
        if r.frames_tx > prev:
            sent_at.append((int(r.cycle * clk_ns), (r.frames_tx - prev) * mtu_bytes))
            prev = r.frames_tx
    end_ns = int(mine[-1].cycle * clk_ns)
    traj = model_trajectory(params, init_ns, cnp_ns, sent_at, end_ns)
    bad = check_reads(traj, mine, clk_ns=clk_ns, lag_ns=lag_ns, conv=conv)
    return {"matches": not bad, "compared": len(mine), "mismatches": bad[:5], "lag_ns": lag_ns,
            "model_trace": [(t, rc, conv.increment(rc)) for t, rc in traj]}
