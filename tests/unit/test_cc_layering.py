"""sw.cc stays a pure leaf-level package: it imports only the standard library, itself and sw.units/sw.clock."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CC_DIR = Path(__file__).resolve().parents[2] / "sw" / "cc"
ALLOWED_PROJECT = ("sw.cc", "sw.units", "sw.clock")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_cc_imports_only_stdlib_and_leaves():
    files = sorted(CC_DIR.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        for name in _imports(path):
            top = name.split(".")[0]
            if top == "__future__" or top in sys.stdlib_module_names:
                continue
            assert name.startswith(ALLOWED_PROJECT), f"{path.name} imports {name}"


def test_models_read_no_clock():
    for path in CC_DIR.glob("*.py"):
        if path.name == "cli.py":      # the CLI reports the simulator's own wall time, never feeds it to a model
            continue
        text = path.read_text()
        assert "time.time(" not in text and "time.sleep(" not in text and "perf_counter" not in text, path.name
