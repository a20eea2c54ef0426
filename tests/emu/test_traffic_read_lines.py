"""emu.traffic.read_lines reads every helper's line at once: a helper blocked writing a line larger than the pipe
buffer must not wait on a helper read before it (the 64- and 128-NIC reachability checks lost probes that way).
A prober late past its budget is named, not fatal, and the budget grows with the pairs per CPU (the 256-NIC
reachability check ran out of a budget that grew only with the pairs per server); probes are resent on an
adaptive, backed-off timeout, not a fixed one (resends piled up behind starved switches and filled their rings)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from emu.probe import MAX_RTO_NS, RetransmitTimer
from emu.traffic import PROBE_PAIR_CPU_NS, TrafficError, probe_budget_ns, read_lines
from sw.clock import Clock

pytestmark = pytest.mark.unit

BIG_BYTES = 1 << 20   # 16x a Linux pipe buffer


def _helper(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_helper_waiting_on_a_blocked_writer_is_answered(tmp_path: Path) -> None:
    done = tmp_path / "big-written"
    big = _helper(f"import sys, pathlib; sys.stdout.write('x' * {BIG_BYTES} + '\\n'); sys.stdout.flush(); "
                  f"pathlib.Path({str(done)!r}).touch()")
    # the small helper answers only after the big one has written all of its line: read one after the other
    # (small first), the big one blocks on its full pipe and the small one waits forever
    small = _helper(f"import pathlib, time\nwhile not pathlib.Path({str(done)!r}).exists(): time.sleep(0.01)\n"
                    "print('small', flush=True)")
    try:
        lines = read_lines(Clock(), {"small": small, "big": big}, 20 * 10**9)
    finally:
        for p in (small, big):
            p.kill()
            p.wait()
    assert lines == {"small": "small", "big": "x" * BIG_BYTES}


def test_a_helper_that_exits_without_a_line_is_named() -> None:
    quiet = _helper("import sys; sys.stderr.write('boom'); sys.exit(1)")
    try:
        with pytest.raises(TrafficError, match="emu.probe on s3 exited: boom"):
            read_lines(Clock(), {"s3": quiet}, 10 * 10**9)
    finally:
        quiet.wait()


def test_partial_read_returns_the_lines_that_came_and_leaves_out_the_late_helper() -> None:
    first, fast = _helper("print('x', flush=True)"), _helper("print('fast', flush=True)")
    slow = _helper("import time; time.sleep(30)")
    try:
        with pytest.raises(TrafficError, match="emu.probe on s2: no answer within 1.0 s"):
            read_lines(Clock(), {"s1": first, "s2": slow}, 10**9)
        assert read_lines(Clock(), {"s1": fast, "s2": slow}, 10**9, partial=True) == {"s1": "fast"}
    finally:
        for p in (first, fast, slow):
            p.kill()
            p.wait()


def test_probe_budget_grows_with_the_pairs_per_cpu_not_per_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    fixed = probe_budget_ns(0, 64, 400, 4)
    assert probe_budget_ns(256 * 255, 64, 400, 4) - fixed == 256 * 255 // 2 * PROBE_PAIR_CPU_NS   # 2 CPUs, not 64
    assert probe_budget_ns(16 * 15, 4, 400, 4) - fixed == 16 * 15 // 2 * PROBE_PAIR_CPU_NS
    assert probe_budget_ns(10, 1, 400, 4) - fixed == 10 * PROBE_PAIR_CPU_NS              # one server: one prober


def test_retransmit_timer_follows_the_rtt_backs_off_and_is_capped() -> None:
    timer = RetransmitTimer(400_000_000)
    assert timer.rto_ns == 400_000_000
    timer.sample(10_000_000)                       # a fast fabric: never below the caller's timeout
    assert timer.rto_ns == 400_000_000
    for _ in range(20):
        timer.sample(2_000_000_000)                # a starved fabric answering after 2 s
    assert 2_000_000_000 < timer.rto_ns < 4_000_000_000
    for _ in range(10):
        timer.backoff()
    assert timer.rto_ns == MAX_RTO_NS
    timer.sample(2_000_000_000)                    # a new sample ends the backoff (RFC 6298 5.7)
    assert timer.rto_ns < MAX_RTO_NS
