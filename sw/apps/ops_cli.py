"""``starpulse ops``: the operations system over a fabric run's telemetry store.

``diagnose`` ranks the top-3 suspects of a window with their evidence, ``watch`` prints that once per interval,
``campaign`` injects random faults into a training job on its own fabric and scores the diagnoses
(``sw.apps.ops_campaign``), ``cost`` measures what the collection costs the emulation (``sw.apps.ops_cost``),
``report`` writes the operator's HTML page (``sw.apps.ops_report``).  The store is the
running fabric's (``--name``, ops on) or a saved file (``--store``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from sw.clock import get_clock
from sw.ops.diagnose import diagnose
from sw.ops.expected import CalibrationError, Expected
from sw.units import float_flag, int_flag
from sw.units.telemetry import TelemetryStore

DEFAULT_CALIBRATION = (1, 4)
"""Steps the expected model is calibrated on (step 0 is the warm-up)."""
WINDOW_STEPS = 2


class OpsError(ValueError):
    """A bad flag or an unusable store: one line naming it."""

    is_user_error = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="ops_command", metavar="SUBCOMMAND", required=True)

    def source(p: argparse.ArgumentParser) -> None:
        p.add_argument("--name", default="default", help="the running fabric (started with ops on; default "
                                                         "'default')")
        p.add_argument("--store", default=None, metavar="FILE", help="a saved telemetry store instead of --name")
        p.add_argument("--since", type=float_flag(0, 1e9, unit="seconds"), default=None, metavar="T",
                       help="judge from T network seconds after the run's start (default: the last "
                            f"{WINDOW_STEPS} steps)")
        p.add_argument("--calibrate", default=f"{DEFAULT_CALIBRATION[0]}:{DEFAULT_CALIBRATION[1]}", metavar="A:B",
                       help="healthy steps A..B to calibrate the expected model on (default %(default)s)")

    dg = sub.add_parser("diagnose", help="top-3 suspects (kind, place, severity, confidence) with evidence")
    source(dg)
    dg.add_argument("--json", action="store_true", help="print JSON")
    wa = sub.add_parser("watch", help="diagnose once per interval, live")
    source(wa)
    wa.add_argument("--interval", type=float_flag(0.1, 3600, unit="seconds"), default=2.0, metavar="S",
                    help="wall seconds between diagnoses (default 2)")
    wa.add_argument("--count", type=int_flag(1, 10**6), default=None, metavar="N", help="stop after N")
    from sw.apps import ops_campaign, ops_cost, ops_report

    rp = sub.add_parser("report", help="write the operator's page: one self-contained HTML file (fabric, links "
                                       "over time, step timelines, diagnosis)")
    source(rp)
    ops_report.add_arguments(rp)
    ca = sub.add_parser("campaign", help="inject random faults into a training job on its own fabric, score "
                                         "detection and localization")
    ops_campaign.add_arguments(ca)
    co = sub.add_parser("cost", help="what the collection costs the emulation: the same job with ops off and on, "
                                     "interleaved pairs, ratios")
    ops_cost.add_arguments(co)


def run(args: argparse.Namespace) -> int:
    if args.ops_command == "campaign":
        from sw.apps import ops_campaign

        return ops_campaign.run(args)
    if args.ops_command == "cost":
        from sw.apps import ops_cost

        return ops_cost.run(args)
    if args.ops_command == "report":
        from sw.apps import ops_report

        return ops_report.run(args)
    if args.ops_command == "diagnose":
        with open_store(args) as store:
            result = diagnose_store(store, args.since, parse_calibration(args.calibrate))
        print(json.dumps(result, indent=2) if args.json else "\n".join(text_lines(result)))
        return 0
    return _watch(args)


def parse_calibration(text: str) -> tuple[int, int]:
    a, sep, b = text.partition(":")
    try:
        lo, hi = int(a), int(b)
    except ValueError:
        lo = hi = -1
    if not sep or lo < 0 or hi < lo + 1:
        raise OpsError(f"--calibrate {text}: expected A:B, healthy steps 0 <= A < B (e.g. 1:4)")
    return lo, hi


def open_store(args: argparse.Namespace) -> TelemetryStore:
    """The store ``--store`` names, else the running fabric ``--name``'s (which must have ops on)."""
    if args.store:
        return TelemetryStore(args.store)
    from emu.fabric_daemon import read_state, request

    if read_state(args.name) is None:
        raise OpsError(f"--name {args.name}: no running fabric of that name (`starpulse fabric up --ops "
                       f"--name {args.name}`, or give --store FILE)")
    db = request(args.name, {"op": "status"})["status"].get("telemetry_db")
    if not db:
        raise OpsError(f"--name {args.name}: that fabric runs without ops telemetry (bring it up with --ops)")
    return TelemetryStore(db)


def expected_of(store: TelemetryStore, calibration: tuple[int, int]) -> Expected:
    """The run's expected model from its calibration steps (every rank's), with the flow-level simulator's
    calibrated predictions where it has them (``sw.apps.ops_sim``)."""
    from sw.apps.ops_sim import store_expected

    if not store.steps():
        raise OpsError(f"{store.path}: the store has no steps yet (no training job recorded into it)")
    try:
        return store_expected(store, calibration)
    except CalibrationError as exc:
        lo, hi = calibration
        raise OpsError(f"--calibrate {lo}:{hi}: {exc}") from None


def window_start_ns(store: TelemetryStore, exp: Expected, since_s: float | None) -> int:
    """The window's start on the store's time base: ``--since`` after the run's origin, else the start of the
    last ``WINDOW_STEPS`` steps after calibration."""
    if since_s is not None:
        return int(store.meta().get("origin_ns", 0) + since_s * 1e9)
    steps = store.steps(exp.until_ns)
    last = max((s["step"] for s in steps), default=exp.last_step)
    first = max(exp.last_step + 1, last - WINDOW_STEPS + 1)
    starts = [s["t0_ns"] for s in steps if s["step"] >= first]
    return max(min(starts), exp.until_ns) if starts else exp.until_ns


def window_diagnosis(store: TelemetryStore, exp: Expected, links: list[dict[str, Any]], since_ns: int,
                     until_ns: int | None = None) -> dict[str, Any]:
    """Diagnosis of the rows in [since, until] (open-ended without ``until_ns``): steps and collectives that started
    in it, polls taken in it; the simulator tests its degraded-link suspects (``sw.apps.ops_sim.explain``).  One
    function for ``ops diagnose/watch/report`` and the campaign; ``window`` names the steps judged, ``expected`` the
    model."""
    from sw.apps.ops_sim import explain

    end = until_ns if until_ns is not None else 2**62
    steps = [s for s in store.steps(since_ns) if since_ns <= s["t0_ns"] and s["t1_ns"] <= end]
    colls = [c for c in store.collectives(since_ns) if since_ns <= c["post_ns"] and c["end_ns"] <= end]
    polls = [p for p in store.port_polls(since_ns) if p["t_ns"] <= end]
    switches = [p for p in store.switch_polls(since_ns) if p["t_ns"] <= end]
    nics = [n for n in store.nic_counters(since_ns) if n["t_ns"] <= end]   # also of a step still running
    result = explain(diagnose(exp, links, steps, colls, polls, switches, nics, store.int_hops(since_ns, until_ns)),
                     exp, store.meta(), colls)
    result["window"] = {"since_ns": since_ns, "until_ns": until_ns, "steps": sorted({s["step"] for s in steps})}
    result["expected"] = exp.to_json()
    return result


def diagnose_store(store: TelemetryStore, since_s: float | None, calibration: tuple[int, int]) -> dict[str, Any]:
    exp = expected_of(store, calibration)
    result = window_diagnosis(store, exp, store.meta().get("links", []), window_start_ns(store, exp, since_s))
    del result["window"]["until_ns"]        # open-ended: `ops diagnose --json`'s window has never named an end
    return result


def text_lines(result: dict[str, Any]) -> list[str]:
    """The diagnosis for people: the window, then each suspect and its evidence chain."""
    sym = result["symptoms"]
    ratio = sym.get("step_ratio")
    comm = sym.get("comm_ratio")
    lines = [f"# window: steps {result['window']['steps'] or 'none'}; step time "
             f"{f'x{ratio:.2f}' if ratio else 'n/a'} of healthy, collectives "
             f"{f'x{comm:.2f}' if comm else 'n/a'} of {sym.get('model', 'alpha-beta')}"]
    if not result["suspects"]:
        lines.append("no suspects: everything within its expected range")
    for i, s in enumerate(result["suspects"], 1):
        lines.append(f"{i}. {s['kind']:<14} {s['place']:<16} severity {s['severity']:<6g} confidence "
                     f"{s['confidence']:.2f}")
        lines += [f"     - {e}" for e in s["evidence"]]
    return lines


def _watch(args: argparse.Namespace) -> int:
    clock = get_clock()
    calibration = parse_calibration(args.calibrate)
    n = 0
    with open_store(args) as store:
        while args.count is None or n < args.count:
            try:
                result = diagnose_store(store, args.since, calibration)
                lines = text_lines(result)
            except OpsError as exc:     # not calibrated yet: say so and keep watching
                lines = [f"waiting: {exc}"]
            print(f"--- {n + 1}", *lines, sep="\n", flush=True)
            n += 1
            if args.count is None or n < args.count:
                clock.sleep_ns(clock.net_duration_ns(args.interval * 1e9))
    return 0


def main(argv: list[str] | None = None) -> int:
    from sw.units.cli_guard import ArgumentParser, call_guarded

    parser = ArgumentParser(prog="starpulse ops")
    add_arguments(parser)
    return call_guarded("starpulse ops", run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
