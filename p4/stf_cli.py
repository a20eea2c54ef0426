"""``starpulse p4 stf``: one STF test (exit 0 pass, 1 fail, 2 bad input) or a corpus of them (a line per test,
then ``N passed, M failed`` and the pass rate; exit 0 when all pass, else 1)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TextIO

from p4.errors import P4Error
from p4.stf import CRASH, PASS, REASONS, StfReport, corpus_tests, run_test


class _TestTimeout(BaseException):
    """Raised by the corpus watchdog; a BaseException so the runner's own ``except Exception`` lets it through."""


def run(args: argparse.Namespace, defines: dict[str, str]) -> int:
    includes = [Path(d) for d in args.include]
    if args.corpus is not None:
        if args.program or args.stf:
            raise P4Error("p4 stf: give either PROG.p4 TEST.stf or --corpus DIR, not both")
        return _corpus(args, includes, defines)
    if not args.program or not args.stf:
        if args.json is not None and args.json.endswith(".p4"):
            raise P4Error(f"p4 stf: --json took {args.json} as its OUT file: put --json after PROG.p4 TEST.stf")
        raise P4Error("p4 stf: needs PROG.p4 and TEST.stf (or --corpus DIR)")
    prog, stf = Path(args.program), Path(args.stf)
    for p in (prog, stf):
        if not p.is_file():
            raise P4Error(f"{p}: no such file")
    rep = run_test(prog, stf, include_dirs=includes, defines=defines, bad_input_raises=True)
    if args.json is not None:
        _write_json(summary([rep]), args.json)
    else:
        _print_report(rep, stf, sys.stdout)
    return 0 if rep.result == PASS else 1


def summary(reports: list[StfReport]) -> dict[str, object]:
    """The JSON of a run: ``tests`` (name, result, reason, ...), ``passed``, ``failed``, ``pass_rate`` (0..1),
    ``reasons`` (failures per reason)."""
    passed = sum(r.result == PASS for r in reports)
    return {
        "tests": [r.as_json() for r in reports],
        "passed": passed,
        "failed": len(reports) - passed,
        "pass_rate": round(passed / len(reports), 4) if reports else 0.0,
        "reasons": {why: sum(r.reason == why for r in reports) for why in REASONS},
    }


def _write_json(doc: dict[str, object], out: str) -> None:
    text = json.dumps(doc, indent=2)
    if out == "-":
        print(text)
        return
    try:
        Path(out).write_text(text + "\n")
    except OSError as exc:
        raise P4Error(f"--json {out}: cannot write it: {exc.strerror or exc}") from None


def _print_report(rep: StfReport, stf: Path, stream: TextIO) -> None:
    if rep.result == PASS and rep.run is not None:
        unchecked = (f"; {sum(rep.run.unchecked.values())} sent to ports the STF does not name (not checked)"
                     if rep.run.unchecked else "")
        print(f"{stf}: pass ({rep.run.packets_in} packets in, {rep.run.packets_out} out, "
              f"{len(rep.run.ports)} ports checked{unchecked})", file=stream)
        return
    print(f"{stf}: FAIL ({rep.reason})", file=stream)
    for line in rep.detail:
        print(f"  {line}", file=stream)


def _line(rep: StfReport) -> str:
    if rep.result == PASS:
        return f"{rep.name}: pass"
    first = rep.detail[0] if rep.detail else ""
    return f"{rep.name}: FAIL {rep.reason}: {first}"


def _corpus(args: argparse.Namespace, includes: list[Path], defines: dict[str, str]) -> int:
    tests = corpus_tests(Path(args.corpus))
    if not tests:
        raise P4Error(f"--corpus {args.corpus}: no X.p4 with an X.stf beside it")
    if not args.timeout_s > 0:
        raise P4Error(f"--timeout-s {args.timeout_s}: must be > 0 seconds")
    stream = sys.stderr if args.json == "-" else sys.stdout     # JSON on stdout: the progress goes to stderr
    width = len(str(len(tests)))
    reports: list[StfReport] = []

    def expire(signum: int, frame: FrameType | None) -> None:
        raise _TestTimeout

    old = signal.signal(signal.SIGALRM, expire)
    try:
        for i, (prog, stf) in enumerate(tests, 1):
            signal.setitimer(signal.ITIMER_REAL, args.timeout_s)
            try:
                rep = run_test(prog, stf, include_dirs=includes, defines=defines)
            except _TestTimeout:
                rep = StfReport(stf.stem, "fail", CRASH, [f"still running after {args.timeout_s:g} s (--timeout-s)"])
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            reports.append(rep)
            print(f"[{i:>{width}}/{len(tests)}] {_line(rep)}", file=stream, flush=True)
    finally:
        signal.signal(signal.SIGALRM, old)
    passed = sum(r.result == PASS for r in reports)
    counts = ", ".join(f"{n} {why}" for why in REASONS if (n := sum(r.reason == why for r in reports)))
    print(f"{passed} passed, {len(reports) - passed} failed (pass rate {100 * passed / len(reports):.1f} %)"
          + (f": {counts}" if counts else ""), file=stream)
    if args.json is not None:
        _write_json(summary(reports), args.json)
    return 0 if passed == len(reports) else 1
