"""The flow-level simulator never imports emu, the P4 target or Mininet (README, Layers), and every module loads."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SIM = Path(__file__).resolve().parents[2] / "sw" / "sim"
FORBIDDEN = ("emu", "p4", "mininet")


def _imported(tree: ast.AST) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.append(node.module or "")
    return out


@pytest.mark.parametrize("path", sorted(SIM.glob("*.py")), ids=lambda p: p.name)
def test_sim_module_imports_no_emu_p4_or_mininet(path):
    names = _imported(ast.parse(path.read_text()))
    bad = [n for n in names if n.split(".")[0] in FORBIDDEN]
    assert not bad, f"{path.name} imports {bad}"
    importlib.import_module(f"sw.sim.{path.stem}" if path.stem != "__init__" else "sw.sim")


def test_the_pure_leaves_it_builds_on_import_nothing_above_them():
    for leaf in ("collectives/fabric_topology.py", "units/crc16.py"):
        names = _imported(ast.parse((SIM.parent / leaf).read_text()))
        assert all(n.split(".")[0] not in ("sw", *FORBIDDEN) for n in names), (leaf, names)
