"""Headless Chromium for the operator page's browser test and its README screenshot: Debian's ``chromium`` driven
by Selenium (pinned in pyproject's dev extras) through Debian's ``chromedriver`` (package ``chromium-driver``).

Why Selenium and Debian's driver: the driver is built from the same Debian source as the browser, so versions
always match and Selenium Manager is never asked to download one (the driver's path is given); Selenium's
Chrome binding reads the browser's console log (``goog:loggingPrefs``) without a hand-written DevTools client.
``close()`` ends chromedriver and every browser process under it by PID (also after a failure) and deletes the
fresh profile directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")


def unavailable() -> str | None:
    """Why no headless browser can run here (a skip reason), or None when one can."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not os.access(path, os.X_OK):
            return f"{path} missing: apt-get install {package} (scripts/bootstrap.sh installs it)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium missing from this Python: pip install -e '.[dev]' (scripts/bootstrap.sh does)"
    return None


def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/PID/stat): tells a PID reused by another process apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def process_tree(root: int) -> list[tuple[int, str]]:
    """``root`` and every process below it, each with its start time, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        start = _start_time(pid)
        if start is not None:
            out.append((pid, start))
            todo += children.get(pid, [])
    return out


class HeadlessChromium:
    """One headless Chromium with a fresh profile in a temp dir, driven through chromedriver."""

    def __init__(self, width: int = 1400, height: int = 1000) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service

        self.width = width
        self.tmp = Path(tempfile.mkdtemp(prefix="opsreport-chromium-"))
        self.driver: Any = None
        self.service = Service(executable_path=CHROMEDRIVER, log_output=subprocess.DEVNULL)
        opts = Options()
        opts.binary_location = CHROMIUM
        for flag in FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--user-data-dir={self.tmp / 'profile'}")
        opts.add_argument(f"--window-size={width},{height}")
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        try:
            self.driver = webdriver.Chrome(service=self.service, options=opts)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> HeadlessChromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self, url: str) -> None:
        """Load ``url`` and wait (at most 30 s) until its script marks the page ``data-rendered``."""
        from selenium.webdriver.support.ui import WebDriverWait

        self.driver.get(url)
        WebDriverWait(self.driver, 30).until(
            lambda d: d.execute_script("return document.body && document.body.getAttribute('data-rendered')"))

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def console_errors(self) -> list[str]:
        """The browser console's errors (uncaught exceptions, console.error, failed loads) since the last call."""
        return [e["message"] for e in self.driver.get_log("browser") if e.get("level") == "SEVERE"]

    def screenshot(self, path: str | os.PathLike[str]) -> None:
        """A PNG of the whole page (the window grown to the document's height)."""
        for _ in range(3):      # the window's size includes what is not the page: grow until the page fits
            page, view = self.js("return [document.documentElement.scrollHeight, window.innerHeight]")
            if view >= page:
                break
            self.driver.set_window_size(self.width, self.driver.get_window_size()["height"] + page - view)
        if not self.driver.save_screenshot(str(path)):
            raise OSError(f"{path}: the browser wrote no screenshot")

    def close(self) -> None:
        """End chromedriver and the browser processes under it by PID, then delete the profile."""
        proc = getattr(self.service, "process", None)
        tree = process_tree(proc.pid) if proc is not None else []
        try:
            if self.driver is not None:
                self.driver.quit()
            else:
                self.service.stop()
        except Exception:      # the processes below are ended by PID all the same
            pass
        for pid, start in reversed(tree):
            if _start_time(pid) == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.tmp, ignore_errors=True)
