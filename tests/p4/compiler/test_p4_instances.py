"""A compiled program is reusable: every Pipeline built from it has its own tables, registers and counters."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from p4.compiler import compile_file, compile_source
from p4.pipeline import Pipeline
from p4.runtime_cli import RuntimeCLI
from sw.clock import ManualClock
from tests.p4.compiler.conftest import PROGRAMS, V1_PRELUDE

if TYPE_CHECKING:
    from pathlib import Path

    from p4.program import Program

pytestmark = pytest.mark.unit

PROGRAM = V1_PRELUDE + """
header eth_t { bit<48> dst; bit<48> src; bit<16> type; }
struct H { eth_t eth; }
struct M { }
parser P(packet_in p, out H h, inout M m, inout standard_metadata_t sm) {
    state start { p.extract(h.eth); transition accept; }
}
control V(inout H h, inout M m) { apply { } }
control I(inout H h, inout M m, inout standard_metadata_t sm) {
    register<bit<32>>(16) seen;
    counter(16, CounterType.packets_and_bytes) rx;
    action fwd(bit<9> port) { sm.egress_spec = port; seen.write((bit<32>)port, 32w7); }
    action drop() { mark_to_drop(sm); }
    table t { key = { h.eth.type: exact; } actions = { fwd; drop; } default_action = drop(); }
    apply { rx.count((bit<32>)sm.ingress_port); t.apply(); }
}
control E(inout H h, inout M m, inout standard_metadata_t sm) { apply { } }
control C(inout H h, inout M m) { apply { } }
control D(packet_out p, in H h) { apply { p.emit(h.eth); } }
V1Switch(P(), V(), I(), E(), C(), D()) main;
"""

FRAME = bytes(12) + b"\x08\x00" + bytes(50)


def _pair(prog: Program) -> tuple[list[Pipeline], list[RuntimeCLI]]:
    pipes = [Pipeline(prog, clock=ManualClock()) for _ in range(2)]
    return pipes, [RuntimeCLI(p) for p in pipes]


def test_two_pipelines_hold_independent_table_entries() -> None:
    prog = compile_source(PROGRAM, "inst.p4")
    (a, b), (cli_a, cli_b) = _pair(prog)
    cli_a.execute("table_add I.t I.fwd 0x0800 => 2")
    assert a.process(1, FRAME)[0] == [(2, FRAME)]
    assert b.process(1, FRAME)[0] == []                 # b has no entry: default drop
    cli_b.execute("table_add I.t I.fwd 0x0800 => 3")    # not a "duplicate entry"
    assert a.process(1, FRAME)[0] == [(2, FRAME)]
    assert b.process(1, FRAME)[0] == [(3, FRAME)]
    assert cli_a.execute("table_num_entries I.t").split()[-1] == "1"
    cli_a.execute("table_clear I.t")
    assert a.process(1, FRAME)[0] == [] and b.process(1, FRAME)[0] == [(3, FRAME)]
    assert not prog.tables["I.t"].entries               # the compiled declarations stay pristine


def test_two_pipelines_hold_independent_registers_and_counters() -> None:
    prog = compile_source(PROGRAM, "inst.p4")
    (a, b), (cli_a, cli_b) = _pair(prog)
    for cli in (cli_a, cli_b):
        cli.execute("table_add I.t I.fwd 0x0800 => 2")
    a.process(1, FRAME)
    a.process(1, FRAME)
    assert cli_a.execute("register_read I.seen 2") == "I.seen[2]= 7"
    assert cli_b.execute("register_read I.seen 2") == "I.seen[2]= 0"
    assert a.counters["I.rx"].packets[1] == 2 and b.counters["I.rx"].packets[1] == 0
    cli_b.execute("register_write I.seen 5 9")
    assert a.registers["I.seen"].values[5] == 0 and b.registers["I.seen"].values[5] == 9
    b.process(4, FRAME)
    assert b.counters["I.rx"].packets[4] == 1 and a.counters["I.rx"].packets[4] == 0
    assert prog.registers["I.seen"].values[2] == 0 and prog.counters["I.rx"].packets[1] == 0


def test_the_same_command_file_programs_both_pipelines(tmp_path: Path) -> None:
    prog = compile_file(PROGRAMS / "basic.p4")
    cmds = tmp_path / "cmds.txt"
    cmds.write_text("table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.2.2/32 => 08:00:00:00:02:22 2\n"
                    "table_set_default MyIngress.ipv4_lpm MyIngress.drop\n")
    (a, b), (cli_a, cli_b) = _pair(prog)
    cli_a.run_file(cmds)
    cli_b.run_file(cmds)                                # raised "duplicate entry" when state was shared
    ip = bytes.fromhex("4500002e00000000401100000a0001010a000202")
    frame = bytes.fromhex("000000000001" "000000000003" "0800") + ip + bytes(26)
    out_a, out_b = a.process(1, frame)[0], b.process(1, frame)[0]
    assert out_a == out_b and [p for p, _ in out_a] == [2]
    assert out_a[0][1][:6] == bytes.fromhex("080000000222")


def test_direct_counters_and_const_entries_are_per_pipeline() -> None:
    prog = compile_file(PROGRAMS / "flow_cache.p4")
    (a, b), _ = _pair(prog)
    tables_a = {t.name: t for t in a.tables.values() if t.direct_counter is not None}
    assert tables_a, "flow_cache.p4 has a direct counter"
    for name, ta in tables_a.items():
        tb = b.tables[name]
        assert ta is not tb and ta.direct_counter is not tb.direct_counter
        assert ta.direct_counter is a.counters[ta.direct_counter.name]   # one object graph per pipeline
    for name, t in prog.tables.items():
        assert len(a.tables[name].entries) == len(t.entries) == len(b.tables[name].entries)
