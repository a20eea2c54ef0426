"""Property-based fuzzing of the switch's command language (simple_switch_CLI commands of p4/runtime_cli.py plus
the switch's own port/PFC/TM commands): every random command line is handled or is one one-line error, and
the switch still forwards afterwards without a pipeline error. Bounded by max_examples."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p4.errors import P4Error
from p4.switch.pipeline_adapter import load_pipeline
from p4.switch.switch import SwitchConfig
from sw.clock import ManualClock
from tests.p4.switch.capture_switch import CapturingSwitch

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

FABRIC_P4 = Path(__file__).resolve().parents[3] / "p4" / "programs" / "fabric.p4"
FUZZ = settings(max_examples=250, deadline=2000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])
TRIED = {"lines": 0, "errors": 0, "frames": 0}

_CLOCK = ManualClock()
_SWITCH = CapturingSwitch(load_pipeline(FABRIC_P4, clock=_CLOCK), SwitchConfig(interfaces=[], priority_levels=8),
                          _CLOCK)
_SENT = _SWITCH.sent
_STATE = _SWITCH.pipeline.pipe.state
_NAMES = sorted({*_STATE.tables, *_STATE.actions, *_STATE.registers, *_STATE.counters, *_STATE.meters,
                 *(n.split(".")[-1] for n in _STATE.tables), *(n.split(".")[-1] for n in _STATE.actions)})
_COMMANDS = _SWITCH.describe()["commands"]
_WORDS = [
    "0", "1", "2", "7", "8", "63", "64", "-1", "510", "511", "512", "99999", str(2**64), "0x10", "0b102", "1e309",
    "nan", "inf", "-inf", "NaN", "0.5", "=>", "&&&", "->", "10.0.0.1", "10.0.0.0/8", "10.0.0.1/40", "::1",
    "fd00::1/128", "02:53:00:00:00:01", "aa:bb", "0.5:10", "nan:1", "1:nan", "strict", "rr", "queue", "port",
    "off", "on", "int", "3,4", "all", "9,9", "100M", "1G", "0G", "-5M", "24", '"', "'", "#", "\\", "é", "\u202e",
    "\x00", "1" * 400, "", " ",
]
FRAME = bytes.fromhex("025300000001" "025300000101" "0800" "4500002e000000004011" "0000" "0a000101" "0a000201"
                      "04d2162e001a0000") + bytes(18)


@st.composite
def _line(draw: st.DrawFn) -> str:
    cmd = draw(st.one_of(st.sampled_from(_COMMANDS), st.sampled_from(_COMMANDS), st.text(max_size=12)))
    args = draw(st.lists(st.one_of(st.sampled_from(_WORDS), st.sampled_from(_NAMES),
                                   st.text(max_size=8), st.integers(-(2**70), 2**70).map(str)), max_size=8))
    return " ".join([cmd, *args])


@FUZZ
@given(st.lists(_line(), min_size=1, max_size=6))
def test_random_command_lines_are_handled_or_one_line_errors(lines: list[str]) -> None:
    for line in lines:
        TRIED["lines"] += 1
        try:
            out = _SWITCH.execute(line)
        except P4Error as exc:
            TRIED["errors"] += 1
            msg = exc.message
            assert "\n" not in msg.strip(), msg
            assert "failed (" not in msg and "internal" not in msg, msg     # the catch-all means a bug
        else:
            assert isinstance(out, str)
    now = _CLOCK.now_ns()
    for port in (1, 2, 3):
        _SWITCH.receive(port, FRAME, now)
    _CLOCK.advance_ns(10_000_000)
    _SWITCH._service(_CLOCK.now_ns())
    TRIED["frames"] += 3
    errors = {p: d.pipeline_error_pkts for p, d in _SWITCH.drops.items() if d.pipeline_error_pkts}
    assert not errors, f"pipeline raised after {lines!r}: {errors}"


def test_fuzz_counts() -> None:
    """Runs after the fuzzer in this module: it tried what it claims (printed with -s for the record)."""
    print(f"\nswitch CLI fuzz: {TRIED['lines']} command lines ({TRIED['errors']} one-line errors), "
          f"{TRIED['frames']} frames forwarded between them")
    if TRIED["lines"]:
        assert TRIED["lines"] >= FUZZ.max_examples and TRIED["errors"] < TRIED["lines"]
