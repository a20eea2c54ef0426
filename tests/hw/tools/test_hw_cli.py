"""``starpulse hw``: Verilog emission per block (small and at the 1024-bit / 1024-QP default), bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hw.tools.blocks import BLOCKS
from sw.cli import main

pytestmark = pytest.mark.unit


def test_verilog_writes_one_module_per_block(tmp_path: Path, capsys) -> None:
    assert main(["hw", "verilog", str(tmp_path), "--qps", "8", "--data-width", "64"]) == 0
    for name in BLOCKS:
        text = (tmp_path / f"{name}.v").read_text()
        assert f"module {name}(" in text
    assert str(tmp_path / "tx_sched.v") in capsys.readouterr().out


@pytest.mark.sim
def test_verilog_at_default_400g_size(tmp_path: Path) -> None:
    """The 1024-bit, 1024-QP defaults elaborate and convert (the only full-size test)."""
    assert main(["hw", "verilog", str(tmp_path)]) == 0
    text = (tmp_path / "tx_sched.v").read_text()
    assert "m_axis__tdata" in text and "[1023:0]" in text


@pytest.mark.parametrize("argv, needle", [
    (["--qps", "1000"], "--qps 1000: must be a power of two"),
    (["--data-width", "100"], "--data-width 100: must be a power of two"),
])
def test_bad_sizes_are_one_line_user_errors(tmp_path: Path, capsys, argv: list[str], needle: str) -> None:
    assert main(["hw", "verilog", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def _cell(kind: str, ins: dict[str, list[int]], outs: dict[str, list[int]]) -> dict:
    ports = {**dict.fromkeys(ins, "input"), **dict.fromkeys(outs, "output")}
    return {"type": kind, "port_directions": ports, "connections": {**ins, **outs}}


def test_logic_levels_count_luts_and_half_carry4s() -> None:
    """FF -> LUT -> LUT -> CARRY4 -> CARRY4 -> FF is 3 levels; INV is free; a second, shorter path is ignored."""
    from hw.tools.synth import logic_levels

    cells = {
        "q": _cell("FDRE", {"D": [9], "C": [1]}, {"Q": [2]}),
        "a": _cell("LUT2", {"I0": [2], "I1": [2]}, {"O": [3]}),
        "n": _cell("INV", {"I": [3]}, {"O": [4]}),
        "b": _cell("LUT6", {"I0": [4]}, {"O": [5]}),
        "c0": _cell("CARRY4", {"S": [5], "CI": ["0"]}, {"CO": [6]}),
        "c1": _cell("CARRY4", {"CI": [6]}, {"O": [9]}),
        "short": _cell("LUT1", {"I0": [2]}, {"O": [10]}),
    }
    assert logic_levels({"modules": {"top": {"cells": cells}}}, "top") == 3


def test_logic_levels_survive_a_combinational_loop() -> None:
    from hw.tools.synth import logic_levels

    cells = {"a": _cell("LUT1", {"I0": [2]}, {"O": [1]}), "b": _cell("LUT1", {"I0": [1]}, {"O": [2]})}
    assert logic_levels({"modules": {"top": {"cells": cells}}}, "top") >= 1


@pytest.mark.sim
def test_report_json_has_levels_within_the_400mhz_budget(capsys) -> None:
    """yosys on the small ICRC generator: resources, logic levels and the rule of thumb in the JSON."""
    assert main(["hw", "report", "--json", "--block", "icrc_gen", "--data-width", "64", "--qps", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = report["blocks"]
    assert row["block"] == "icrc_gen" and row["luts"] > 100 and row["ffs"] > 500
    assert 2 <= row["levels"] <= report["max_levels_400mhz"] == 6
    assert "400 MHz" in report["levels_rule"]


def test_yosys_failure_detail_is_never_empty(tmp_path: Path) -> None:
    """A failing yosys run is described by its stderr, else stdout, else the log tail, else its exit code."""
    from hw.tools.synth import failure_detail

    log = tmp_path / "x.yosys.log"
    assert failure_detail(1, "ERROR: boom\n", "", log) == "exit 1, stderr: ERROR: boom"
    log.write_text("2.50.14.5. Executing ABC9.\nRunning ABC command: yosys-abc\n\n")
    assert failure_detail(1, "", "", log) == ("exit 1, log x.yosys.log: 2.50.14.5. Executing ABC9. / "
                                              "Running ABC command: yosys-abc")
    assert failure_detail(3, "", " \n", tmp_path / "missing.log") == "exit 3 with no output on stderr, stdout or log"


@pytest.mark.sim
@pytest.mark.slow
def test_report_synthesizes_csr_bank(capsys) -> None:
    """csr_bank (an ArrayLayout port: Amaranth names its elements ``counters[i]``) goes through yosys + ABC9."""
    assert main(["hw", "report", "--json", "--block", "csr_bank", "--qps", "16", "--data-width", "64"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["blocks"]
    assert row["block"] == "csr_bank" and row["luts"] > 0 and row["ffs"] > 0 and row["levels"] >= 1
