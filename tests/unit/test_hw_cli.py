"""``starpulse hw``: Verilog emission per block (small and at the 1024-bit / 1024-QP default), bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from hw.blocks import BLOCKS
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
