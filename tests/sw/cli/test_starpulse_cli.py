"""The CLI dispatcher and the shared leaf modules (clock, units)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sw.cli import COMMANDS, main
from sw.clock import Clock, ManualClock
from sw.units import UnitError, parse_duration_ns, parse_rate_bps, parse_size_bytes

pytestmark = pytest.mark.unit


def test_every_command_module_has_the_interface():
    import importlib

    for name, (module_name, _) in COMMANDS.items():
        module = importlib.import_module(module_name)
        assert callable(module.add_arguments), name
        assert callable(module.run), name


def test_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "sw.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for name in COMMANDS:
        assert name in out.stdout


def test_unknown_command_is_a_clean_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("text,want", [("100M", 100_000_000), ("1G", 10**9), ("400G", 400 * 10**9),
                                        ("2.5G", 2_500_000_000), ("10Mbps", 10**7)])
def test_parse_rate(text, want):
    assert parse_rate_bps(text) == want


@pytest.mark.parametrize("text", ["10X", "", "fast", "-1G", "0"])
def test_parse_rate_rejects(text):
    with pytest.raises(UnitError) as exc:
        parse_rate_bps(text, what="--link-rate")
    assert "--link-rate" in str(exc.value)


def test_parse_size_and_duration():
    assert parse_size_bytes("8K") == 8192
    assert parse_size_bytes("64M") == 64 * 2**20
    assert parse_duration_ns("10us") == 10_000
    assert parse_duration_ns("2ms") == 2_000_000
    with pytest.raises(UnitError):
        parse_size_bytes("8Q")


def test_manual_clock_and_dilation():
    clock = ManualClock(start_ns=5)
    assert clock.now_ns() == 5
    clock.advance_ns(10)
    assert clock.now_ns() == 15
    with pytest.raises(ValueError):
        clock.advance_ns(-1)
    slow = Clock(dilation=1000)
    assert slow.wall_rate_bps(100e9) == 100e6
    assert slow.wall_duration_ns(1_000) == 1_000_000
    with pytest.raises(ValueError):
        Clock(dilation=0)
