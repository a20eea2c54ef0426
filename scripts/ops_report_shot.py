"""The README's screenshot of the operator's page: ``starpulse ops report`` of a store (default: the recorded
campaign of ``tests/sw/ops/data``, diagnosed over the first step after one of its injected faults) opened in
headless Chromium (``scripts/headless_browser.py``) and saved as a PNG (default ``docs/ops_report.png``).

    .venv/bin/python scripts/ops_report_shot.py [--store FILE] [--fault ACTION:TARGET] [--out PNG]
"""

from __future__ import annotations

import argparse
import gzip
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "scripts")]

from headless_browser import HeadlessChromium, unavailable  # noqa: E402

from sw.apps import ops_cli  # noqa: E402
from sw.units.cli_guard import ArgumentParser, call_guarded  # noqa: E402
from sw.units.telemetry import TelemetryStore  # noqa: E402

RECORDED = REPO / "tests" / "sw" / "ops" / "data" / "campaign_4x2_seed5.sqlite.gz"
DEFAULT_FAULT = "slow_link:s1:p0l0"


class ShotError(ValueError):
    is_user_error = True


def first_step_window(store: TelemetryStore, action: str, target: str) -> tuple[float, float]:
    """``--since``/``--until`` (network s after the run's start) from the last ``action target`` injection to the
    end of the first step that started after it (the campaign's first look), widened by 1 us each side."""
    origin = int(store.meta().get("origin_ns", 0))
    row = store.db.execute("SELECT max(t_ns) FROM faults WHERE action = ? AND target = ?", (action, target)).fetchone()
    if row[0] is None:
        raise ShotError(f"--fault {action}:{target}: no such injection in {store.path}")
    end = store.db.execute("SELECT max(t1_ns) FROM steps WHERE step = (SELECT min(step) FROM steps WHERE t0_ns >= ?)",
                           (row[0],)).fetchone()[0]
    if end is None:
        raise ShotError(f"--fault {action}:{target}: no step started after it in {store.path}")
    return (row[0] - origin - 1000) / 1e9, (end - origin + 1000) / 1e9


def run(args: argparse.Namespace) -> int:
    reason = unavailable()
    if reason:
        raise ShotError(f"no headless browser: {reason}")
    action, sep, target = args.fault.partition(":")
    if not sep or not target:
        raise ShotError(f"--fault {args.fault}: expected ACTION:TARGET (e.g. {DEFAULT_FAULT})")
    with tempfile.TemporaryDirectory(prefix="opsreport-shot-") as tmp:
        store_path = Path(args.store) if args.store else Path(tmp) / "recorded.sqlite"
        if not args.store:
            store_path.write_bytes(gzip.decompress(RECORDED.read_bytes()))
        with TelemetryStore(store_path) as store:
            since_s, until_s = first_step_window(store, action, target)
        page = Path(tmp) / "ops_report.html"
        if ops_cli.main(["report", str(page), "--store", str(store_path), "--since", repr(since_s),
                         "--until", repr(until_s)]) != 0:
            return 2
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with HeadlessChromium() as browser:
            browser.open(page.as_uri())
            browser.screenshot(out)
    print(f"wrote {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="ops_report_shot", description=__doc__.splitlines()[0])
    p.add_argument("--store", default=None, metavar="FILE", help="a telemetry store (default: the recorded campaign)")
    p.add_argument("--fault", default=DEFAULT_FAULT, metavar="ACTION:TARGET",
                   help="diagnose the first step after this injection (default %(default)s)")
    p.add_argument("--out", default=str(REPO / "docs" / "ops_report.png"), metavar="PNG")
    return call_guarded("ops_report_shot", run, p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
