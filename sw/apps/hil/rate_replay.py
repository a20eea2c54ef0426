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
two reads can show a mismatch (never a false match).  A CNP that arrives within that lag after a timer's deadline
may reach the RTL before its sweep applies the expiry, and its timer reset then swallows it: the replay follows
each such order (``model_trajectories``) and the reads match when one order explains all of them.
"""

from __future__ import annotations

import bisect
import copy
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


MAX_ORDERS = 64
"""Event orders the replay follows at most (each CNP with a timer due within the RTL's lag before it doubles them at
most; past this, further ties take the model's own order)."""


def _cnp_orders(model: DcqcnRp, t: int, window_ns: int) -> list[DcqcnRp]:
    """The model after a CNP at ``t``, once per order the RTL may have taken it in, the model's own order first.  The
    RTL's sweep applies a timer expiry up to ``window_ns`` after its deadline, and a CNP resets the QP's timers,
    swallowing an expiry not yet swept: each expiry due in ``(t - window_ns, t]`` came before the CNP only if the
    sweep reached it first, so there is one state per last deadline the sweep reached (or none)."""
    base = copy.deepcopy(model)
    base.advance(max(base.now_ns, t - window_ns))
    due = sorted({d for d in (base.next_alpha_ns, base.next_rate_ns) if d <= t}) if window_ns > 0 else []
    out: list[DcqcnRp] = []
    seen = set()
    for cut in (due[-1] if due else None, None, *due[:-1]):
        m = copy.deepcopy(base)
        if cut is not None:
            m.advance(cut)
        m.next_alpha_ns, m.next_rate_ns = max(m.next_alpha_ns, t + 1), max(m.next_rate_ns, t + 1)
        m.on_cnp(t)
        if m.state() not in seen:
            seen.add(m.state())
            out.append(m)
    return out


def model_trajectories(params: DcqcnParams, init_ns: int, cnp_ns: list[int], sent_at: list[tuple[int, int]],
                       end_ns: int, window_ns: int = 0) -> list[list[tuple[int, int]]]:
    """The model's current rate (kb/s) as change points ``(ns, rc_kbps)`` from ``init_ns`` to ``end_ns``: CNPs at
    ``cnp_ns``, ``(ns, bytes)`` sent, every timer expiry in between (the model's own deadlines); one trajectory per
    order of a CNP and the timer expiries due within ``window_ns`` before it (``_cnp_orders``), the model's own
    order first."""
    first = DcqcnRp(params, now_ns=init_ns)
    paths: list[tuple[DcqcnRp, list[tuple[int, int]]]] = [(first, [(init_ns, first.rc_kbps)])]
    events = sorted([(t, 0, 0) for t in cnp_ns if t >= init_ns] + [(t, 1, n) for t, n in sent_at if t >= init_ns])
    events.append((end_ns, 2, 0))

    def note(model: DcqcnRp, out: list[tuple[int, int]], t: int) -> None:
        if model.rc_kbps != out[-1][1]:
            out.append((t, model.rc_kbps))

    for t, kind, n in events:
        nxt: list[tuple[DcqcnRp, list[tuple[int, int]]]] = []
        for model, out in paths:
            settled = t - window_ns if kind == 0 else t       # expiries the sweep surely applied before this event
            while model.next_deadline_ns <= settled:
                d = model.next_deadline_ns
                model.advance(d)
                note(model, out, d)
            if kind == 0:
                window = window_ns if len(paths) + len(nxt) < MAX_ORDERS else 0
                for k, m in enumerate(_cnp_orders(model, t, window)):
                    branch = out if k == 0 else [*out]
                    note(m, branch, t)
                    nxt.append((m, branch))
                continue
            if kind == 1:
                model.on_bytes_sent(n, t)
            else:
                model.advance(t)
            note(model, out, t)
            nxt.append((model, out))
        paths = nxt
    return [out for _, out in paths]


def model_trajectory(params: DcqcnParams, init_ns: int, cnp_ns: list[int], sent_at: list[tuple[int, int]],
                     end_ns: int) -> list[tuple[int, int]]:
    """The model's own order of events: its one trajectory (``model_trajectories`` with no tie window)."""
    return model_trajectories(params, init_ns, cnp_ns, sent_at, end_ns)[0]


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
    CNPs; the verdict and its figures (``matches``, ``compared``, ``mismatches`` (at most 5, of the model's own
    order when no order matches), ``orders`` followed, ``order`` (0: the model's own), ``model_trace``: (ns,
    rc_kbps, increment) per change of that order)."""
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
    trajs = model_trajectories(params, init_ns, cnp_ns, sent_at, end_ns, window_ns=lag_ns)
    verdicts = [check_reads(traj, mine, clk_ns=clk_ns, lag_ns=lag_ns, conv=conv) for traj in trajs]
    k = next((i for i, bad in enumerate(verdicts) if not bad), 0)   # the first order that explains every read
    traj, bad = trajs[k], verdicts[k]
    return {"matches": not bad, "compared": len(mine), "mismatches": bad[:5], "lag_ns": lag_ns,
            "orders": len(trajs), "order": k, "model_trace": [(t, rc, conv.increment(rc)) for t, rc in traj]}
