"""The batched stages (``ingress_batch``, ``egress_batch``) give exactly what ``ingress``/``egress`` give per packet."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from p4.compiler import compile_source
from p4.pipeline import EgressResult, Pipeline
from p4.runtime_cli import RuntimeCLI
from sw.clock import ManualClock
from tests.p4.compiler.conftest import V1_PRELUDE

if TYPE_CHECKING:
    from p4.program import Program

pytestmark = pytest.mark.unit

# Egress writes the queue metadata into the frame, counts per port, and per EtherType drops, E2E-clones,
# truncates or recirculates, so every kind of egress result is compared.
PROGRAM = V1_PRELUDE + """
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct H { eth_t eth; }
struct M { bit<8> loops; }
parser P(packet_in p, out H h, inout M m, inout standard_metadata_t sm) {
    state start { p.extract(h.eth); transition accept; }
}
control V(inout H h, inout M m) { apply { } }
control I(inout H h, inout M m, inout standard_metadata_t sm) {
    apply {
        sm.egress_spec = (bit<9>)h.eth.dst[3:0];
        if (h.eth.type == 0x0005) { mark_to_drop(sm); }
        if (sm.instance_type == 4) { h.eth.dst = 48w0xaaaaaaaaaaaa; }
    }
}
control E(inout H h, inout M m, inout standard_metadata_t sm) {
    counter(16, CounterType.packets_and_bytes) tx;
    register<bit<32>>(1) last_delay;
    apply {
        tx.count((bit<32>)sm.egress_port);
        bit<32> before;
        last_delay.read(before, 0);
        last_delay.write(0, sm.deq_timedelta);
        h.eth.src = (bit<48>)(sm.enq_qdepth[15:0] ++ sm.deq_qdepth[15:0] ++ before[15:0]);
        if (h.eth.type == 0x0001) { mark_to_drop(sm); }
        else if (h.eth.type == 0x0002 && sm.instance_type == 0) { clone(CloneType.E2E, 7); }
        else if (h.eth.type == 0x0003) { truncate(20); }
        else if (h.eth.type == 0x0004 && sm.instance_type == 0) { recirculate_preserving_field_list(0); }
        h.eth.dst[47:40] = (bit<8>)sm.egress_global_timestamp[7:0] ^ (bit<8>)sm.enq_timestamp[7:0];
    }
}
control C(inout H h, inout M m) { apply { } }
control D(packet_out p, in H h) { apply { p.emit(h.eth); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""


def _frame(port: int, ethertype: int, k: int) -> bytes:
    return bytes([0, 0, 0, 0, k & 0xFF, port]) + bytes([2, 0, 0, 0, 0, k & 0xFF]) + ethertype.to_bytes(2, "big") \
        + bytes(range(k % 7, k % 7 + 40))


FRAMES = [_frame(1 + k % 3, [0x0800, 0x0001, 0x0002, 0x0003, 0x0004, 0x0800, 0x0005][k % 7], k) for k in range(60)]


def _pipeline(prog: Program) -> Pipeline:
    pipe = Pipeline(prog, clock=ManualClock(start_ns=5_000_000))
    RuntimeCLI(pipe).execute("mirroring_add 7 9")
    return pipe


def _outcome(r: EgressResult | tuple[int, bytes]) -> tuple:
    """What a per-packet EgressResult amounts to, comparable across pipelines."""
    if type(r) is tuple:
        return ([r], [], [], None)
    return (r.out, [(c.egress_port, c.instance_type, c.length_bytes) for c in r.queued], r.recirculate,
            r.dropped)


def test_egress_batch_gives_the_same_frames_as_per_packet_egress() -> None:
    prog = compile_source(PROGRAM, "batch.p4")
    one, many = _pipeline(prog), _pipeline(prog)
    queued_one = [qp for f in FRAMES for qp in one.ingress(1, f).queued]
    queued_many = [qp for f in FRAMES for qp in many.ingress(1, f).queued]
    meta = [(k % 5, k % 3, 10 * k, None if k % 2 else 4_000 + k) for k in range(len(queued_one))]
    per_packet = []
    for qp, (enq, deq, dt, ets) in zip(queued_one, meta, strict=True):
        r = one.egress(qp, enq_qdepth=enq, deq_qdepth=deq, deq_timedelta_us=dt, enq_timestamp_us=ets)
        per_packet.append(_outcome(r))
    batched, kinds, start = [], set(), 0
    while start < len(queued_many):               # the batch stops after clones/recirculations: go on
        results = many.egress_batch(queued_many[start:], meta[start:])
        assert results, "egress_batch makes progress"
        batched.extend(_outcome(r) for r in results)
        kinds.update(type(r) for r in results)
        start += len(results)
    assert batched == per_packet
    assert kinds == {tuple, EgressResult}, "both plain and special results occurred"
    assert any(o[1] for o in batched) and any(o[2] for o in batched) and any(o[3] for o in batched)
    assert one.counters["E.tx"].packets == many.counters["E.tx"].packets
    assert one.registers["E.last_delay"].values == many.registers["E.last_delay"].values
    assert one.drops == many.drops


def test_egress_batch_reports_a_raising_packet_and_stops_there() -> None:
    prog = compile_source(PROGRAM, "batch.p4")
    pipe = _pipeline(prog)
    queued = [qp for f in FRAMES[:6] if f[12:14] == b"\x08\x00" for qp in pipe.ingress(1, f).queued]
    queued[0].S = queued[0].S[:3]                 # a corrupt state list: the generated code raises
    results = pipe.egress_batch(queued, [(0, 0, 0, None)] * len(queued))
    assert len(results) == 1 and isinstance(results[0], EgressResult) and results[0].error is not None


def test_ingress_batch_equals_ingress_per_frame() -> None:
    prog = compile_source(PROGRAM, "batch.p4")
    one, many = _pipeline(prog), _pipeline(prog)
    per_frame = [one.ingress(2, f) for f in FRAMES]
    batched = list(many.ingress_batch(2, FRAMES))
    assert len(batched) == len(per_frame)
    for r1, rb in zip(per_frame, batched, strict=True):
        queued = rb if type(rb) is list else rb.queued
        assert [(q.S, q.egress_port, q.priority, q.length_bytes, q.instance_type) for q in r1.queued] == \
            [(q.S, q.egress_port, q.priority, q.length_bytes, q.instance_type) for q in queued]
        assert (r1.dropped is not None) == (not queued if type(rb) is list else rb.dropped is not None)
    assert one.drops == many.drops and one.parser_errors == many.parser_errors
