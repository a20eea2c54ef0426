"""The operator's page in a real headless browser (Debian's Chromium via Selenium and chromedriver,
``scripts/headless_browser.py``), served by a localhost HTTP server of the test: it renders the recorded fabric
(4 servers, 2 leaves, 2 spines, 8 ranks, 12 links), logs no console error, and the injected fault's place is
highlighted as the diagnosis's first suspect (and marked as the injected fault); the time slider and the metric
selector repaint the drawing."""

from __future__ import annotations

import functools
import gzip
import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sw.apps import ops_cli
from sw.units.telemetry import TelemetryStore

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "scripts"))
import headless_browser  # noqa: E402
from ops_report_shot import RECORDED, first_step_window  # noqa: E402

HIGHLIGHT = "rgb(230, 0, 0)"
"""The page's suspect colour (``.suspect`` in ``sw/apps/ops_report.html``)."""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: pytest shows failures, not every request."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A directory served on 127.0.0.1 (a free port) for the test's lifetime, and its base URL."""
    root = tmp_path_factory.mktemp("opsreport-site")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[headless_browser.HeadlessChromium]:
    reason = headless_browser.unavailable()
    if reason:
        pytest.skip(reason)
    with headless_browser.HeadlessChromium() as b:
        yield b


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> TelemetryStore:
    path = tmp_path_factory.mktemp("opsreport-store") / "run.sqlite"
    path.write_bytes(gzip.decompress(RECORDED.read_bytes()))
    return TelemetryStore(path)


COUNTS = """return {
  servers: document.querySelectorAll('#fabric g.node.server').length,
  switches: document.querySelectorAll('#fabric g.node.leaf, #fabric g.node.spine').length,
  ranks: document.querySelectorAll('#fabric g.rank').length,
  links: document.querySelectorAll('#fabric g.link').length,
  steps: document.querySelectorAll('#timeline g.step').length,
  suspects: document.querySelectorAll('#diagnosis li[data-suspect]').length};"""
MARKED = """const e = document.getElementById(arguments[0]);
if (!e) return null;
const shape = e.querySelector('line.halo') || e.querySelector('rect');
return {classes: Array.from(e.classList), suspect: e.getAttribute('data-suspect'),
        stroke: getComputedStyle(shape).stroke, opacity: getComputedStyle(shape).strokeOpacity,
        highlighted: document.querySelectorAll('.suspect').length};"""


@pytest.mark.parametrize(("action", "target", "element"), [
    ("switch_stop", "sp0", "node-sp0"),
    ("slow_gpu", "4", "rank-4"),
    ("slow_link", "s1:p0l0", "link-s1--p0l0"),
])
def test_the_page_renders_cleanly_and_highlights_the_injected_fault(
        browser: headless_browser.HeadlessChromium, site: tuple[Path, str], recorded: TelemetryStore,
        action: str, target: str, element: str) -> None:
    root, base = site
    since_s, until_s = first_step_window(recorded, action, target)
    page = f"report-{action}.html"
    assert ops_cli.main(["report", str(root / page), "--store", str(recorded.path), "--since", repr(since_s),
                         "--until", repr(until_s)]) == 0
    browser.console_errors()                  # the log so far (an earlier page's) is not this page's
    browser.open(f"{base}/{page}")
    counts = browser.js(COUNTS)
    assert counts["servers"] == 4 and counts["switches"] == 4 and counts["ranks"] == 8 and counts["links"] == 12
    assert counts["steps"] == 344 and counts["suspects"] >= 1
    assert browser.console_errors() == []
    marked = browser.js(MARKED, element)
    assert marked is not None, element
    assert {"suspect", "fault"} <= set(marked["classes"]) and marked["suspect"] == "1", marked
    assert marked["stroke"] == HIGHLIGHT and float(marked["opacity"]) > 0, marked


def test_the_console_check_sees_a_page_error(browser: headless_browser.HeadlessChromium,
                                             site: tuple[Path, str]) -> None:
    """The check above is not blind: an uncaught exception of a page is in the console log it reads."""
    root, base = site
    (root / "broken.html").write_text('<!DOCTYPE html><html><head><link rel="icon" href="data:,"></head><body>'
                                      '<script>document.body.setAttribute("data-rendered", "1");'
                                      'throw new Error("opsreport-canary");</script></body></html>')
    browser.console_errors()
    browser.open(f"{base}/broken.html")
    errors = browser.console_errors()
    assert any("opsreport-canary" in e for e in errors), errors


SLIDE = """const [index, metric] = arguments;
const slider = document.getElementById('slider'), select = document.getElementById('metric');
slider.value = String(index);
slider.dispatchEvent(new Event('input'));
select.value = metric;
select.dispatchEvent(new Event('change'));
return {down: document.getElementById('link-p0l0--sp1').classList.contains('down'),
        stopped: document.getElementById('node-sp0').classList.contains('stopped'),
        legend: document.getElementById('legend').textContent,
        poll: document.getElementById('polltime').textContent};"""


def test_the_slider_repaints_links_and_switches_at_each_poll(browser: headless_browser.HeadlessChromium,
                                                             site: tuple[Path, str], recorded: TelemetryStore) -> None:
    """The recorded run's leaf-spine link p0l0<->sp1 was down for a stretch of polls and spine sp0 stopped for
    another: the slider at such a poll draws them so, at the first poll not."""
    root, base = site
    assert ops_cli.main(["report", str(root / "whole.html"), "--store", str(recorded.path), "--since", "0"]) == 0
    origin = recorded.meta()["origin_ns"]
    times = [t for t, in recorded.db.execute("SELECT DISTINCT t_ns FROM ports ORDER BY t_ns")]
    down_t = recorded.db.execute("SELECT min(t_ns) FROM ports WHERE up = 0").fetchone()[0]
    stopped_t = recorded.db.execute("SELECT min(t_ns) FROM switches WHERE state != 'running'").fetchone()[0]
    stopped_i = max(i for i, t in enumerate(times) if t <= stopped_t)
    browser.console_errors()
    browser.open(f"{base}/whole.html")
    first = browser.js(SLIDE, 0, "util")
    assert not first["down"] and not first["stopped"] and first["poll"].startswith(f"poll 1/{len(times)}")
    down = browser.js(SLIDE, times.index(down_t), "queue")
    assert down["down"] and "queue depth" in down["legend"]
    assert f"{(down_t - origin) / 1e9:.3f} s" in down["poll"]
    stopped = browser.js(SLIDE, stopped_i, "loss")
    assert stopped["stopped"] and "loss" in stopped["legend"]
    assert browser.console_errors() == []
