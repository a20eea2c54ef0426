"""The golden replay of ``hil run --cc hpcc`` (``sw.apps.hil.hpcc_replay``): engine events and QP_RATE reads that
follow ``sw.cc.Hpcc`` fed the same INT-echo ACK frames match; a rate one step off, a read showing a rate the model
left long ago, a lost ACK or a wrong ``ack_seq`` pairing do not."""

from __future__ import annotations

import dataclasses

import pytest

from sw.apps.hil.hpcc_replay import KIND_INIT, HpccEvent, replay, widen_ack_seq
from sw.apps.hil.rate_replay import RateRead
from sw.cc import AckInfo, Hpcc, HpccParams, RateToIncrement
from sw.roce import Flow, FlowTemplates, Opcode
from sw.roce.softnic.qp_pacer import QpPacer
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.int_md import IntHopRecord, insert_int, strip_int

pytestmark = pytest.mark.unit

CLK_NS = 2.5
CONV = RateToIncrement()
PARAMS = HpccParams(line_rate_kbps=4_000_000, base_rtt_ns=4_000, min_rate_kbps=100_000, rate_ai_kbps=40_000)
UNIT = 314
FLOW = Flow(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01", src_ip="10.0.0.2", dst_ip="10.0.0.1",
            src_qpn=0x5000, dst_qpn=0x300)
KIND_UPDATE = 4
INIT_CYCLE = 1_000
ACK_GAP = 800            # clocks between ACKs (2 us)


def _frame(psn: int, k: int) -> bytes:
    """The ACK of ``psn`` echoing 3 hops whose first is loaded (~1.5 x the link, a growing queue)."""
    ack = FlowTemplates(FLOW)[Opcode.ACKNOWLEDGE].build(psn, b"", ext=HeaderFields(syndrome=0x1F, msn=psn + 1))
    hops = [IntHopRecord(node_id=h + 1, ingress_port=1, egress_port=2, hop_latency=0, queue_id=0,
                         queue_occupancy=(3 * k if h == 0 else 0), egress_timestamp=100 + 2 * k,
                         egress_tx_bytes=(750 if h == 0 else 400) * 2 * k) for h in range(3)]
    return insert_int(ack, hops, echo=True)


def _run() -> tuple[list[tuple[int, str]], list[HpccEvent]]:
    """ACK frames (every 4th PSN) and the events of an engine that follows the model exactly."""
    model = Hpcc(PARAMS, now_ns=int(INIT_CYCLE * CLK_NS))
    host = QpPacer(model, 0)
    frames, events = [], [HpccEvent(INIT_CYCLE, KIND_INIT, 0, PARAMS.line_rate_kbps, PARAMS.w_max_bytes, 0, 0)]
    for k in range(30):
        cycle = INIT_CYCLE + (k + 1) * ACK_GAP
        psn, snd_nxt = 4 * k + 3, 4 * k + 6
        frame = _frame(psn, k)
        frames.append((cycle - 200, frame.hex()))
        hops = host.int_hops(list(strip_int(frame)[1]), UNIT)
        model.on_ack(AckInfo(psn + 1, snd_nxt, hops), int(cycle * CLK_NS))
        events.append(HpccEvent(cycle, KIND_UPDATE if k else 2, 0, model.rate_kbps, model.window_bytes, psn + 1,
                                snd_nxt))
    return frames, events


def _reads(events: list[HpccEvent], delay: int = 10) -> list[RateRead]:
    """A read ``delay`` clocks after every event, and one half-way to the next."""
    out = []
    for e, nxt in zip(events, [*events[1:], None], strict=True):
        out.append(RateRead(e.cycle + delay, 0, CONV.increment(e.rate_kbps), 0))
        if nxt is not None:
            out.append(RateRead((e.cycle + nxt.cycle) // 2, 0, CONV.increment(e.rate_kbps), 0))
    return out


def _replay(frames, events, reads) -> dict:
    return replay(PARAMS, clk_ns=CLK_NS, qp=0, qlen_unit_bytes=UNIT, ack_frames=frames, events=events, reads=reads,
                  conv=CONV)


def test_an_engine_that_follows_the_model_matches() -> None:
    frames, events = _run()
    out = _replay(frames, events, _reads(events))
    assert out["matches"] and out["per_ack_matches"], out["mismatches"]
    assert out["acks"] == 30 and out["compared"] == len(_reads(events)) - 1 and out["first_divergence"] is None
    rates = [inc for _, _, inc in out["model_trace"]]
    assert min(rates) < CONV.increment(PARAMS.line_rate_kbps), "the loaded hop cut nothing: the check would be empty"


def test_a_rate_one_step_off_is_the_first_divergence() -> None:
    frames, events = _run()
    k = 12
    events[k + 1] = dataclasses.replace(events[k + 1], rate_kbps=events[k + 1].rate_kbps + 1)
    out = _replay(frames, events, _reads(_run()[1]))
    assert not out["matches"] and not out["per_ack_matches"]
    first = out["first_divergence"]
    assert first["ack"] == k and first["rtl_rate_kbps"] == first["model_rate_kbps"] + 1 and len(first["hops"]) == 3


def test_a_stale_read_a_lost_ack_and_a_torn_pairing_are_mismatches() -> None:
    frames, events = _run()
    reads = _reads(events)
    late = _reads(events, delay=-300)       # each read shows the rate before the event it follows: no longer allowed
    assert not _replay(frames, events, late[2:])["matches"]
    out = _replay(frames[:-1], events, reads)
    assert not out["matches"] and "29 INT-echo ACKs entered rx_s_axis, the engine made 30" in out["mismatches"][0]
    torn = [*events[:5], dataclasses.replace(events[5], ack_seq=events[5].ack_seq + 4), *events[6:]]
    assert any("ack_seq" in m for m in _replay(frames, torn, reads)["mismatches"])
    assert _replay(frames, events, [])["matches"] is False


def test_widen_ack_seq_across_the_psn_wrap() -> None:
    assert widen_ack_seq(5, 10) == 6
    assert widen_ack_seq((1 << 24) - 1, (1 << 24) + 3) == 1 << 24
    assert widen_ack_seq(2, (5 << 24) + 3) == (5 << 24) + 3
