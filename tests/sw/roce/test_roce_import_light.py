"""``import sw.roce`` (and its sub-packages) loads no Scapy: the public names load on first use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def test_import_sw_roce_does_not_load_scapy() -> None:
    code = ("import sys, sw.roce, sw.roce.wire, sw.roce.transport, sw.roce.softnic, sw.roce.tools; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scapy', 'numpy')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_public_names_still_load_on_first_use() -> None:
    code = "import sw.roce as r; print(r.Opcode.SEND_ONLY.name, getattr(r, 'decode').__module__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["SEND_ONLY", "sw.roce.wire.decode"], done.stdout + done.stderr
