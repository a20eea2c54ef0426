"""`starpulse p4 stf`: p4c's STF packet tests on the embedded target (issue 21): each command, wildcards, '$',
failures with their diff, bad input at file:line (exit 2), the corpus mode's lines, summary and JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from p4.stf import Expectation, cli_match_word, compare_frame, packet_bytes, parse_stf
from p4.tables import KeySpec
from sw.cli import main

pytestmark = pytest.mark.unit
DATA = Path(__file__).resolve().parent / "data"
PROGRAMS = Path(__file__).resolve().parents[3] / "p4" / "programs"
PROG = DATA / "stf_cmds.p4"
FRAME = "01 00 0000 00000000 00 000000000000"       # op=1: by_op sends it to port 2 unchanged
ADD = "add by_op data.op:1 fwd(port:2)\n"


def _stf(tmp_path: Path, text: str, name: str = "t.stf") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_every_command_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "stf", str(PROG), str(DATA / "stf_cmds.stf")]) == 0
    out = capsys.readouterr().out
    assert "pass (16 packets in" in out
    assert "1 sent to ports the STF does not name (not checked)" in out


def test_key_names_as_p4c_writes_them_and_a_direct_counter(capsys: pytest.CaptureFixture[str]) -> None:
    """hs$0.$valid$ / hs$0.valid name hdr.hs[0].isValid(), hs$0.f names hdr.hs[0].f; check_counter hits($low)."""
    assert main(["p4", "stf", str(DATA / "stf_keys.p4"), str(DATA / "stf_keys.stf")]) == 0
    assert "pass (4 packets in, 3 out, 3 ports checked)" in capsys.readouterr().out


def test_json_of_one_test(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "stf", str(PROG), str(DATA / "stf_cmds.stf"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["passed"], doc["failed"], doc["pass_rate"]) == (1, 0, 1.0)
    (t,) = doc["tests"]
    assert (t["name"], t["result"], t["reason"]) == ("stf_cmds", "pass", None)
    ports = {p["port"]: p for p in t["ports"]}
    assert sorted(ports) == [0, 1, 2, 3, 4, 5, 6, 9]
    assert ports[2]["got"][1].startswith("055A")            # register_write regs 2 0x5a, then read_reg
    assert ports[3]["got"] == ["030000000000000000000000000000"]   # the I2E clone
    assert t["unchecked_ports"] == {"12": 1}


@pytest.mark.parametrize("body, lines", [
    # an unexpected extra packet on a port the test names
    (f"packet 0 {FRAME}\nexpect 2 {FRAME}\npacket 0 {FRAME}\n",
     ["port 2: expected 1 packet(s), got 2", "got      #2:"]),
    # a packet on a port named only as an input: nothing was expected there
    (f"packet 2 {FRAME}\n", ["port 2: expected 0 packet(s), got 1"]),
    # a wrong byte: where, and both frames
    (f"packet 0 {FRAME}\nexpect 2 01 77 0000 00000000 00 000000000000\n",
     ["port 2: packet #1 (expect at line 3) differs at byte 1 (nibble 2): expected 7, got 0",
      "expected #1 (line 3): 017700000000000000000000000000", "got      #1:           010000000000000000000000000000"]),
])
def test_mismatch_fails_with_a_diff_per_port(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str,
                                             lines: list[str]) -> None:
    assert main(["p4", "stf", str(PROG), str(_stf(tmp_path, ADD + body))]) == 1
    out = capsys.readouterr().out
    assert "FAIL (mismatch)" in out
    for line in lines:
        assert line in out, out


def test_dollar_means_exact_length(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = _stf(tmp_path, f"{ADD}packet 0 {FRAME}\nexpect 2 01 00\n", "p.stf")
    exact = _stf(tmp_path, f"{ADD}packet 0 {FRAME}\nexpect 2 01 00 $\n", "e.stf")
    assert main(["p4", "stf", str(PROG), str(prefix)]) == 0
    assert main(["p4", "stf", str(PROG), str(exact)]) == 1
    assert "too long: 15 bytes, expected exactly 2 ('$')" in capsys.readouterr().out


def test_failed_check_counter_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stf = _stf(tmp_path, f"{ADD}packet 0 {FRAME}\nexpect 2 {FRAME}\ncheck_counter op_hits(1) packets == 3\n")
    assert main(["p4", "stf", str(PROG), str(stf)]) == 1
    assert "line 4: check_counter op_hits(1) packets == 3: packets is 1" in capsys.readouterr().out


def test_remove_one_entry_and_counter_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``remove TABLE KEY:VALUE`` deletes the entry that match added (the packet then takes the default, drop);
    ``counter_write`` sets a cell as simple_switch_CLI does (check_counter sees the written value plus the count)."""
    text = (f"{ADD}add by_op data.op:2 fwd(port:2)\npacket 0 {FRAME}\nexpect 2 {FRAME}\n"
            "remove by_op data.op:1\n"
            f"packet 0 {FRAME}\n"
            "counter_write op_hits 1 40 400\n"
            f"packet 0 {FRAME}\n"
            "check_counter op_hits(1) packets == 41\ncheck_counter op_hits(1) bytes == 415\n")
    assert main(["p4", "stf", str(PROG), str(_stf(tmp_path, text))]) == 0, capsys.readouterr()
    assert "pass (3 packets in, 1 out" in capsys.readouterr().out
    again = _stf(tmp_path, f"{ADD}remove by_op data.op:1\nremove by_op data.op:1\n", "again.stf")
    assert main(["p4", "stf", str(PROG), str(again)]) == 2
    assert "again.stf:3: remove: no entry added to Ing.by_op matches data.op:1" in capsys.readouterr().err


@pytest.mark.parametrize("text, message", [
    ("wait\npacket 0 0G\n", "t.stf:2: packet: data must be hex digits"),
    ("expect 1 0x00\n", "t.stf:1: expect: data must be hex digits or '*'"),
    ("expect x 00\n", "t.stf:1: expect: port 'x' is not a decimal number"),
    ("packet 600 00\n", "t.stf:1: packet: port 600 out of range 0..510"),
    ("# fine\nno_packet\n", "t.stf:2: unsupported STF command 'no_packet'"),
    ("add nosuch data.op:1 fwd(port:2)\n", "t.stf:1: unknown table 'nosuch'"),
    ("add by_op data.nothere:1 fwd(port:2)\n", "t.stf:1: unknown key field of table Ing.by_op 'data.nothere'"),
    ("add by_op data.op:1 fwd(prt:2)\n", "t.stf:1: action Ing.fwd takes (port); unknown prt; missing port"),
    ("add by_op data.op:0x1FF fwd(port:2)\n", "does not fit in 8 bits"),
    ("setdefault by_c set_b(val:1)\n", "t.stf:1: action Ing.set_b takes (val, port); missing port"),
    ("check_counter op_hits(9) packets == 1\n", "t.stf:1: check_counter: index 9 out of range"),
    ("setdefault by_op\n", "t.stf:1: expected ACTION(PARAM:VALUE, ...), got ''"),
    ("mirroring_add 5\n", "t.stf:1: mirroring_add: wrong number of arguments"),
    ("register_read nosuch 1\n", "t.stf:1: register_read: unknown register 'nosuch'"),
])
def test_bad_input_exits_2_with_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                                              message: str) -> None:
    stf = _stf(tmp_path, text)
    assert main(["p4", "stf", str(PROG), str(stf)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_match_words_as_p4c_runner_writes_them() -> None:
    t32, l32 = KeySpec("f", "ternary", 32), KeySpec("f", "lpm", 32)
    assert cli_match_word("0x****0101", t32) == "0x00000101&&&0x0000FFFF"
    assert cli_match_word("0b1*0", KeySpec("f", "ternary", 3)) == "0b100&&&0b101"
    assert cli_match_word("0x0A00****", l32) == "0x0A000000/16"
    assert cli_match_word("10.0.0.0/8", l32) == "10.0.0.0/8"
    assert cli_match_word("7", KeySpec("f", "range", 8)) == "7->7"
    assert cli_match_word("5", KeySpec("f", "ternary", 8)) == "5&&&255"


def test_packet_digits_as_p4c_runner_reads_them() -> None:
    assert packet_bytes("200") == b"\x20\x00"          # an odd last digit is a byte of its own
    assert packet_bytes("abc") == b"\xab\x0c"
    assert packet_bytes("") == b""


def test_compare_frame_wildcards_and_length() -> None:
    frame = bytes.fromhex("0a0b0c")
    assert compare_frame(Expectation(1, "0A*B", False), frame) == ""
    assert compare_frame(Expectation(1, "0A0B0C", True), frame) == ""
    assert compare_frame(Expectation(1, "0A0B0C0D", False), frame).startswith("too short")
    assert compare_frame(Expectation(1, "0A0B", True), frame).startswith("too long")
    assert "nibble 3" in compare_frame(Expectation(1, "0A0C", False), frame)


def test_parser_strips_comments_and_keeps_line_numbers() -> None:
    lines = parse_stf("# header\n\nPACKET 1 00 11  # trailing\n  expect 2\n", "x.stf")
    assert [(ln.lineno, ln.cmd, ln.args) for ln in lines] == [(3, "packet", "1 00 11"), (4, "expect", "2")]


def test_shipped_basic_program(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "stf", str(PROGRAMS / "basic.p4"), str(DATA / "basic.stf")]) == 0


def test_corpus_mode_lines_summary_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(PROG, corpus / "a_pass.p4")
    shutil.copy(DATA / "stf_cmds.stf", corpus / "a_pass.stf")
    shutil.copy(PROG, corpus / "b_mismatch.p4")
    (corpus / "b_mismatch.stf").write_text(f"packet 0 {FRAME}\nexpect 2 {FRAME}\n")     # dropped by default
    (corpus / "c_compile.p4").write_text("#include <core.p4>\ncontrol C() { apply { x = 1; } }\n")
    (corpus / "c_compile.stf").write_text("")
    shutil.copy(PROG, corpus / "d_unsupported.p4")
    (corpus / "d_unsupported.stf").write_text("no_packet\n")
    shutil.copy(PROG, corpus / "e_no_stf.p4")                                            # no .stf: not a test
    out_json = tmp_path / "run.json"
    assert main(["p4", "stf", "--corpus", str(corpus), "--json", str(out_json)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "[1/4] a_pass: pass"
    assert out[1].startswith("[2/4] b_mismatch: FAIL mismatch: port 2: expected 1 packet(s), got 0")
    assert out[2].startswith("[3/4] c_compile: FAIL compile error: ")
    assert out[3].startswith("[4/4] d_unsupported: FAIL unsupported command: ")
    assert out[4] == "1 passed, 3 failed (pass rate 25.0 %): 1 compile error, 1 mismatch, 1 unsupported command"
    doc = json.loads(out_json.read_text())
    assert (doc["passed"], doc["failed"], doc["pass_rate"]) == (1, 3, 0.25)
    assert [(t["name"], t["result"], t["reason"]) for t in doc["tests"]] == [
        ("a_pass", "pass", None), ("b_mismatch", "fail", "mismatch"), ("c_compile", "fail", "compile error"),
        ("d_unsupported", "fail", "unsupported command")]


def test_corpus_bad_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "stf", "--corpus", str(tmp_path / "none")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert main(["p4", "stf", "--corpus", str(tmp_path)]) == 2
    assert "no X.p4 with an X.stf" in capsys.readouterr().err
    assert main(["p4", "stf", str(PROG)]) == 2
    assert "needs PROG.p4 and TEST.stf" in capsys.readouterr().err
    assert main(["p4", "stf", "--json", str(PROG), str(DATA / "stf_cmds.stf")]) == 2
    assert "put --json after PROG.p4 TEST.stf" in capsys.readouterr().err
    assert main(["p4", "stf", "--corpus", str(DATA), "--timeout-s", "0"]) == 2
    assert "--timeout-s 0.0: must be > 0 seconds" in capsys.readouterr().err


def test_corpus_json_on_stdout_progress_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["p4", "stf", "--corpus", str(DATA), "--json"]) == 0       # stf_cmds, stf_keys (no basic.p4 here)
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert (doc["passed"], doc["failed"], doc["pass_rate"]) == (2, 0, 1.0)
    assert err.splitlines() == ["[1/2] stf_cmds: pass", "[2/2] stf_keys: pass",
                                "2 passed, 0 failed (pass rate 100.0 %)"]
