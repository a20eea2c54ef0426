"""The command names older issues spell out (`python -m sw.roce.incast`, `emu.hol_bench`) still run the apps."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("alias", "app"), [("sw.roce.incast", "sw.apps.incast_bench"),
                                            ("emu.hol_bench", "sw.apps.hol_bench")])
def test_alias_runs_the_app_with_its_flags(alias: str, app: str) -> None:
    """--help through the alias is the app's help; a bad flag value is the app's one-line error and exit 2."""
    ok = subprocess.run([sys.executable, "-m", alias, "--help"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert f"python -m {app}" in ok.stdout and "--json" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", alias, "--senders", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr and "--senders" in bad.stderr


def test_importing_an_alias_runs_nothing() -> None:
    """The launchers only act as __main__: importing one neither runs the app nor loads the app layer."""
    code = "import sys, sw.roce.incast, emu.hol_bench; print(any(m.startswith('sw.apps') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
