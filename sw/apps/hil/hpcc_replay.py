"""Golden replay of the RTL NIC's HPCC in a ``hil run --cc hpcc``: the INT-echo ACKs the bridge saw enter
``rx_s_axis``, read as the host stack reads them (``strip_int``, ``decode``, ``QpPacer.int_hops``), fed to the one
golden model ``sw.cc.Hpcc`` (the parameters the driver wrote, read back from the NIC), against the HPCC engine's
events and every QP_RATE value the host driver read.

Pairing: the engine takes INT-echo ACKs in arrival order (one FIFO), so its k-th ACK event (``bridge_tb.HpccProbe``)
is the k-th INT-echo ACK into ``rx_s_axis``.  The model takes ``AckInfo(ack_seq, snd_nxt, hops)``: ``snd_nxt`` is the
event's (the RTL's count of the QP's frames sent since QP_INIT when the feeder took the ACK: the NIC counts sequences
in packets), ``ack_seq`` the ACK's PSN + 1 widened against it (``widen_ack_seq``, as the feeder does), and the
event's own ``ack_seq`` must equal that (a torn pairing or a wrong widening shows here first).  Per ACK, the
engine's rate after it must equal the model's (``per_ack``).  The trace: the model's rate changes at each event's
clock (the engine's WRITE state); a QP_RATE read at clock ``t`` matches when its value equals the limiter increment
(``sw.cc.RateToIncrement``) of the model's rate at some time in ``[t - lag_ns, t]`` (``lag_ns``: the rate's way
from WRITE through the rate register to the read-back mirror); values are compared bit for bit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sw.apps.hil.rate_replay import RateRead, check_reads
from sw.cc import AckInfo, Hpcc, HpccParams, RateToIncrement
from sw.roce.softnic.qp_pacer import QpPacer
from sw.roce.wire.decode import decode
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.int_md import strip_int

KIND_INIT = 0           # hw.hpcc.KIND_INIT: a QP_INIT, not an ACK (the other kinds are ACK outcomes)
PSN_BITS = 24
WRITE_LAG_NS = 100      # WRITE -> RATE_MULW -> RATE_OUT -> rate register -> mirror: a few tens of clocks


@dataclass(frozen=True)
class HpccEvent:
    """One HPCC engine event as the probe saw it: clock, kind, QP, rate (kb/s) and window it wrote, the ACK's
    ``ack_seq`` and ``snd_nxt`` (engine units: packets)."""

    cycle: int
    kind: int
    qp: int
    rate_kbps: int
    window_bytes: int
    ack_seq: int
    snd_nxt: int


def widen_ack_seq(psn: int, snd_nxt: int) -> int:
    """An ACK's PSN + 1 as a 64-bit sequence: the largest value <= ``snd_nxt`` with those low 24 bits."""
    return snd_nxt - ((snd_nxt - (psn + 1)) & ((1 << PSN_BITS) - 1))


def replay(params: HpccParams, *, clk_ns: float, qp: int, qlen_unit_bytes: int, ack_frames: list[tuple[int, str]],
           events: list[HpccEvent], reads: list[RateRead], conv: RateToIncrement,
           lag_ns: int = WRITE_LAG_NS) -> dict[str, Any]:
    """Feed the model the ACKs of ``qp`` after its last QP_INIT, compare each ACK's rate and every QP_RATE read;
    the verdict and its figures (``matches``, ``acks``, ``per_ack_matches``, ``compared``, ``mismatches`` (at most
    5), ``first_divergence`` (the first ACK whose rate differs, with its inputs, or None), ``model_trace``)."""
    inits = [e for e in events if e.qp == qp and e.kind == KIND_INIT]
    if not inits:
        return {"matches": False, "acks": 0, "per_ack_matches": False, "compared": 0,
                "mismatches": [f"no QP_INIT event of QP {qp}"], "first_divergence": None, "model_trace": []}
    init = inits[-1]
    acks = [e for e in events if e.qp == qp and e.kind != KIND_INIT and e.cycle > init.cycle]
    frames = [(c, bytes.fromhex(h)) for c, h in ack_frames if c > init.cycle - 1]
    init_ns = int(init.cycle * clk_ns)
    model = Hpcc(params, now_ns=init_ns)
    host = QpPacer(model, 0)        # the host stack's INT conversion (units, link rate per hop)
    traj = [(init_ns, model.rate_kbps)]
    bad: list[str] = []
    first: dict[str, Any] | None = None
    if init.rate_kbps != model.rate_kbps:
        bad.append(f"QP_INIT at clock {init.cycle}: engine rate {init.rate_kbps} kb/s, model {model.rate_kbps}")
    if len(frames) != len(acks):
        bad.append(f"{len(frames)} INT-echo ACKs entered rx_s_axis, the engine made {len(acks)} ACK events")
    for k, (ev, (cycle, frame)) in enumerate(zip(acks, frames, strict=False)):
        try:
            plain, records = strip_int(frame)
            psn = decode(plain).psn
        except RoceFormatError as exc:
            bad.append(f"ACK {k} (clock {cycle}): {exc}")
            break
        hops = host.int_hops(list(records), qlen_unit_bytes)
        ack_seq = widen_ack_seq(psn, ev.snd_nxt)
        if ack_seq != ev.ack_seq:
            bad.append(f"ACK {k} (clock {cycle}, PSN {psn}): the feeder's ack_seq {ev.ack_seq}, widened {ack_seq}")
        t_ns = max(traj[-1][0], int(ev.cycle * clk_ns))
        model.on_ack(AckInfo(ack_seq, ev.snd_nxt, hops), t_ns)
        if model.rate_kbps != traj[-1][1]:
            traj.append((t_ns, model.rate_kbps))
        if model.rate_kbps != ev.rate_kbps and first is None:
            first = {"ack": k, "arrival_cycle": cycle, "event_cycle": ev.cycle, "psn": psn, "ack_seq": ack_seq,
                     "snd_nxt": ev.snd_nxt, "hops": [asdict(h) for h in hops],
                     "rtl_rate_kbps": ev.rate_kbps, "model_rate_kbps": model.rate_kbps,
                     "model_window_bytes": model.window_bytes, "rtl_window_bytes": ev.window_bytes}
            bad.append(f"ACK {k} (clock {ev.cycle}): engine rate {ev.rate_kbps} kb/s, model {model.rate_kbps}")
    per_ack = first is None and len(frames) == len(acks)
    mine = [r for r in reads if r.qp == qp and r.cycle * clk_ns >= init_ns + lag_ns]
    bad += check_reads(traj, mine, clk_ns=clk_ns, lag_ns=lag_ns, conv=conv)
    if not mine:
        bad.append("no QP_RATE read after QP_INIT")
    return {"matches": not bad, "acks": len(acks), "per_ack_matches": per_ack, "compared": len(mine),
            "mismatches": bad[:5], "first_divergence": first, "lag_ns": lag_ns,
            "model_trace": [(t, rc, conv.increment(rc)) for t, rc in traj]}
