"""``--target-compat bmv2``: each check refuses a program p4c's BMv2 back end rejects, at the offending line:col,
and lets through the nearest program it accepts; every shipped program passes; the old fabric.p4 is caught."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from string import Template

import pytest

from p4.compat_bmv2 import Bmv2Compat, TargetCompatError
from p4.compiler import compile_file, compile_source

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]
PROGRAMS = sorted((ROOT / "p4" / "programs").glob("*.p4"))
OLD_FABRIC = Path(__file__).with_name("data") / "fabric_ecmp_applied_twice.p4"
MARK = "/*<-*/"

# A small v1model program; each case replaces some of the $slots.
TEMPLATE = Template("""#include <core.p4>
#include <v1model.p4>
header ethernet_t { bit<48> dst; bit<48> src; bit<16> type; }
header ip_t { bit<8> ttl; bit<8> proto; bit<16> csum; }
struct headers_t {
    ethernet_t eth;
    ip_t ip;
    $headers
}
struct meta_t { bit<8> x; bit<8> y; }
parser P(packet_in pkt, out headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    state start {
        pkt.extract(hdr.eth);
        pkt.extract(hdr.ip);
        $parser
        transition accept;
    }
}
control V(inout headers_t hdr, inout meta_t meta) {
    apply {
        $verify
    }
}
control I(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    action fwd(bit<9> port) { sm.egress_spec = port; }
    action set_x(bit<8> v) { meta.x = v; }
    table t1 { key = { hdr.eth.dst: exact; } actions = { fwd; set_x; NoAction; } default_action = NoAction(); }
    table t2 { key = { hdr.eth.src: exact; } actions = { fwd; NoAction; } default_action = NoAction(); }
    $ingress_locals
    apply {
        $ingress
    }
}
control E(inout headers_t hdr, inout meta_t meta, inout standard_metadata_t sm) {
    apply {
        $egress
    }
}
control C(inout headers_t hdr, inout meta_t meta) {
    apply {
        $compute
    }
}
control D(packet_out pkt, in headers_t hdr) {
    apply {
        $deparser
    }
}
V1Switch(P(), V(), I(), E(), C(), D()) main;
""")
DEFAULTS = {"headers": "", "parser": "", "verify": "", "ingress_locals": "", "ingress": "t1.apply();", "egress": "",
            "compute": "", "deparser": "pkt.emit(hdr.eth);\n        pkt.emit(hdr.ip);"}


def program(**slots: str) -> str:
    return TEMPLATE.substitute({**DEFAULTS, **slots})


# (id, slots p4c rejects with the offending line marked, text at the reported column, message part, slots it accepts)
CASES = [
    ("table_twice_on_one_path",
     {"ingress": "t1.apply();\n        t2.apply();\n        t1.apply(); /*<-*/"}, "t1.apply", "twice on one path",
     {"ingress": "t1.apply();\n        t2.apply();"}),
    ("table_on_two_paths_different_next",
     {"ingress": "if (meta.x == 1) {\n            t1.apply();\n            meta.y = 1;\n        } else {\n"
                 "            t1.apply(); /*<-*/\n        }\n        t2.apply();"},
     "t1.apply", "different next step",
     {"ingress": "if (meta.x == 1) {\n            t1.apply();\n            if (meta.y == 1) { }\n        } else {\n"
                 "            t1.apply();\n        }\n        t2.apply();"}),
    ("table_after_its_own_switch",
     {"ingress": "switch (t1.apply().action_run) {\n            fwd: { t2.apply(); }\n        }\n"
                 "        if (meta.x == 2) {\n            t2.apply(); /*<-*/\n        }"},
     "t2.apply", "twice on one path",
     {"ingress": "switch (t1.apply().action_run) {\n            fwd: { t2.apply(); }\n"
                 "            default: { t2.apply(); }\n        }"}),
    ("table_hit_then_applied_again",
     {"ingress": "if (t1.apply().hit) {\n            meta.x = 1;\n        }\n        t1.apply(); /*<-*/"},
     "t1.apply", "twice on one path",
     {"ingress": "if (t1.apply().hit) {\n            meta.x = 1;\n        }\n        t2.apply();"}),
    ("if_in_deparser",
     {"deparser": "pkt.emit(hdr.eth);\n        if (hdr.ip.isValid()) { /*<-*/\n            pkt.emit(hdr.ip);\n"
                  "        }"},
     "if", "deparser", {}),
    ("if_in_compute_checksum",
     {"compute": "if (hdr.ip.isValid()) { /*<-*/\n            update_checksum(true, { hdr.ip.ttl, hdr.ip.proto },"
                 " hdr.ip.csum, HashAlgorithm.csum16);\n        }"},
     "if", "checksum control",
     {"compute": "update_checksum(hdr.ip.isValid(), { hdr.ip.ttl, hdr.ip.proto }, hdr.ip.csum, "
                 "HashAlgorithm.csum16);"}),
    ("computed_checksum_field",
     {"verify": "verify_checksum(hdr.ip.isValid(),\n            { hdr.ip.ttl + 8w1, /*<-*/\n"
                "              hdr.ip.proto }, hdr.ip.csum, HashAlgorithm.csum16);"},
     "hdr.ip.ttl +", "field list",
     {"verify": "verify_checksum(hdr.ip.isValid(),\n            { hdr.ip.ttl, (bit<8>) 1,\n"
                "              hdr.ip.proto }, hdr.ip.csum, HashAlgorithm.csum16);"}),
    ("call_under_if_in_action",
     {"ingress_locals": "action maybe_drop() {\n        if (meta.x == 1) {\n            mark_to_drop(sm); /*<-*/\n"
                        "        }\n    }",
      "ingress": "maybe_drop();"},
     "mark_to_drop", "under an if inside an action",
     {"ingress_locals": "action maybe_set() {\n        if (meta.x == 1) {\n            meta.y = 2;\n        }\n    }",
      "ingress": "maybe_set();"}),
    ("exit_under_if_in_action",
     {"ingress_locals": "action stop() {\n        if (meta.x == 1) {\n            exit; /*<-*/\n        }\n"
                        "        meta.y = 1;\n    }",
      "ingress": "stop();"},
     "exit", "under an if inside an action",
     {"ingress_locals": "action stop() {\n        meta.y = 1;\n        exit;\n    }", "ingress": "stop();"}),
    ("clone_i2e_in_egress",
     {"egress": "clone(CloneType.I2E, 32w5); /*<-*/"}, "clone", "in egress",
     {"egress": "clone(CloneType.E2E, 32w5);"}),
    ("bool_action_data",
     {"ingress_locals": "action flag(bool on) { /*<-*/\n        meta.y = on ? 8w1 : 8w0;\n    }\n"
                        "    table t3 { key = { hdr.eth.type: exact; } actions = { flag; NoAction; } }",
      "ingress": "t3.apply();"},
     "bool on", "action data",
     {"ingress_locals": "action flag(bit<1> on) {\n        meta.y = (bit<8>) on;\n    }\n"
                        "    table t3 { key = { hdr.eth.type: exact; } actions = { flag; NoAction; } }",
      "ingress": "t3.apply();"}),
    ("scalar_in_headers_struct",
     {"headers": "bit<8> scratch; /*<-*/"}, "bit<8> scratch", "headers struct", {"headers": ""}),
    ("unknown_table_property",
     {"ingress_locals": "table t3 {\n        key = { hdr.eth.type: exact; }\n        actions = { fwd; }\n"
                        "        max_group_size = 8; /*<-*/\n    }",
      "ingress": "t3.apply();"},
     "max_group_size", "table property",
     {"ingress_locals": "table t3 {\n        key = { hdr.eth.type: exact; }\n        actions = { fwd; }\n"
                        "        size = 8;\n    }",
      "ingress": "t3.apply();"}),
    ("direct_counter_on_two_tables",
     {"ingress_locals": "direct_counter(CounterType.packets) dc;\n"
                        "    table t3 { key = { hdr.eth.type: exact; } actions = { NoAction; } counters = dc; }\n"
                        "    table t4 {\n        key = { hdr.eth.dst: exact; }\n        actions = { NoAction; }\n"
                        "        counters = dc; /*<-*/\n    }",
      "ingress": "t3.apply();\n        t4.apply();"},
     "counters", "belongs to one table",
     {"ingress_locals": "direct_counter(CounterType.packets) dc;\n    direct_counter(CounterType.packets) dc4;\n"
                        "    table t3 { key = { hdr.eth.type: exact; } actions = { NoAction; } counters = dc; }\n"
                        "    table t4 { key = { hdr.eth.dst: exact; } actions = { NoAction; } counters = dc4; }",
      "ingress": "t3.apply();\n        t4.apply();"}),
    ("direct_meter_without_table",
     {"ingress_locals": "direct_meter<bit<8>>(MeterType.packets) dm; /*<-*/\n"
                        "    action m() { dm.read(meta.y); }\n"
                        "    table t3 { key = { hdr.eth.type: exact; } actions = { m; } }",
      "ingress": "t3.apply();"},
     "direct_meter", "no table has it",
     {"ingress_locals": "direct_meter<bit<8>>(MeterType.packets) dm;\n"
                        "    action m() { dm.read(meta.y); }\n"
                        "    table t3 { key = { hdr.eth.type: exact; } actions = { m; } meters = dm; }",
      "ingress": "t3.apply();"}),
    ("extern_call_in_parser",
     {"parser": "hash(meta.x, HashAlgorithm.crc16, 8w0, { hdr.ip.ttl }, 8w255); /*<-*/"},
     "hash", "parser state",
     {"parser": "meta.x = hdr.ip.ttl;\n        verify(hdr.ip.ttl != 0, error.NoMatch);"}),
    ("two_lpm_keys",
     {"ingress_locals": "table t3 {\n        key = {\n            hdr.eth.dst: lpm;\n"
                        "            hdr.eth.src: lpm; /*<-*/\n        }\n        actions = { fwd; }\n    }",
      "ingress": "t3.apply();"},
     "hdr.eth.src", "lpm keys",
     {"ingress_locals": "table t3 {\n        key = {\n            hdr.eth.dst: lpm;\n"
                        "            hdr.eth.src: ternary;\n        }\n        actions = { fwd; }\n    }",
      "ingress": "t3.apply();"}),
]


def _marked(text: str, at: str) -> tuple[int, int]:
    """(line, column) of ``at`` on the marked line."""
    for i, line in enumerate(text.splitlines(), 1):
        if MARK in line:
            return i, line.index(at) + 1
    raise AssertionError("no marked line")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_check_rejects_at_the_construct_and_accepts_the_fixed_program(case: tuple) -> None:
    name, bad, at, words, good = case
    bad_text = program(**bad)
    compile_source(bad_text, name=name)                 # our own target runs it
    with pytest.raises(TargetCompatError) as exc:
        compile_source(bad_text, name=name, checks=(Bmv2Compat(),))
    err = exc.value
    assert (err.pos.line, err.pos.col) == _marked(bad_text, at), err.render()
    assert words in err.message, err.message
    assert err.render().splitlines()[0].startswith(f"{name}:{err.pos.line}:{err.pos.col}: error: ")
    assert err.render().splitlines()[2].strip() == "^"
    compile_source(program(**good), name=name, checks=(Bmv2Compat(),))


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_every_shipped_program_is_bmv2_compatible(path: Path) -> None:
    compile_file(path, checks=(Bmv2Compat(),))


def test_old_fabric_is_flagged_at_the_second_ecmp_group_apply() -> None:
    lines = OLD_FABRIC.read_text().splitlines()
    applies = [i for i, line in enumerate(lines, 1) if "ecmp_group.apply();" in line]
    assert len(applies) == 2
    with pytest.raises(TargetCompatError) as exc:
        compile_file(OLD_FABRIC, checks=(Bmv2Compat(),))
    err = exc.value
    assert (err.pos.line, err.pos.col) == (applies[1], lines[applies[1] - 1].index("ecmp_group") + 1)
    assert "FabricIngress.ecmp_group" in err.message and f"first at line {applies[0]}" in err.message
    assert len(err.findings) == 1


def test_cli_check_target_compat_exit_codes() -> None:
    cmd = [sys.executable, "-m", "sw.cli", "p4", "check", "--target-compat", "bmv2"]
    bad = subprocess.run([*cmd, str(OLD_FABRIC)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2, bad.stderr
    first = bad.stderr.splitlines()[0]
    assert first.startswith(f"{OLD_FABRIC}:339:21: error: table FabricIngress.ecmp_group"), bad.stderr
    assert "Traceback" not in bad.stderr
    good = subprocess.run([*cmd, "p4/programs/fabric.p4"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert good.returncode == 0 and "compatible with bmv2" in good.stdout, good.stderr
    plain = subprocess.run([*cmd[:5], str(OLD_FABRIC)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert plain.returncode == 0, plain.stderr          # without the flag: our own target compiles it as before


def test_fabric_up_bmv2_refuses_an_incompatible_fabric_program_before_building(monkeypatch, tmp_path, capsys) -> None:
    from emu import fabric
    from emu.p4switch import missing_bmv2_tools
    from sw.cli import main

    monkeypatch.setenv("STARPULSE_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(fabric, "FABRIC_P4", str(OLD_FABRIC))
    assert main(["fabric", "up", "--backend", "bmv2", "--name", "compat26"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"--backend bmv2: {OLD_FABRIC}:339:21: error: table FabricIngress.ecmp_group" in err
    assert "on PATH" not in err                          # refused before looking for the BMv2 tools
    monkeypatch.setattr(fabric, "FABRIC_P4", str(ROOT / "p4" / "programs" / "fabric.p4"))
    if missing_bmv2_tools():                             # the fixed program passes; then the missing tools stop it
        assert main(["fabric", "up", "--backend", "bmv2", "--name", "compat26"]) == 2
        assert "on PATH" in capsys.readouterr().err
