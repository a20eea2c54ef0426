"""The README's layering, as a test: every import under hw/ p4/ emu/ sw/ (function-level and relative ones too)
points down.  No exemptions: a module that needs something above its layer moves up (``sw.apps``), or the
helper it needs moves down into a leaf (``sw.units``).  One named exception: the plot set-up every ``--plot``
shares (``sw.units.plot``) imports matplotlib inside its function, never at module level (``DRAWS_LAZILY``)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("hw", "p4", "emu", "sw")
LEAVES = ("sw.clock", "sw.units")
TOP = ("sw.cli", "sw.apps")
"""The top floor: the ``starpulse`` dispatcher and the applications/experiments; they may import anything."""

ALLOWED: dict[str, tuple[str, ...]] = {
    "sw.clock": (),
    "sw.units": (),
    "sw.cc": (),
    "sw.roce": ("sw.cc",),
    "sw.collectives": ("sw.roce", "sw.cc"),
    "sw.sim": ("sw.collectives", "sw.roce", "sw.cc"),
    "sw.workload": ("sw.collectives", "sw.roce", "sw.cc"),
    "sw.ops": (),
    "p4": (),
    "hw": ("sw.cc",),
    "emu": ("p4", "sw.cc", "sw.roce", "sw.collectives"),
}
"""Layer -> the project layers it may import besides itself and the leaves (which every layer may import)."""

PURE = ("sw.clock", "sw.units", "sw.cc", "sw.ops")
"""Layers that import only the standard library (and the leaves): pure values and models."""

THIRD_PARTY_HOME = {"mininet": ("emu",), "amaranth": ("hw",), "grpc": ("p4",)}
"""Third-party packages only one layer (and the top) may import."""

DRAWS_LAZILY = {"sw.units.plot": "matplotlib"}
"""The leaf module every ``--plot`` draws through, and the package it may import inside a function (never at
module level): importing the leaf still loads only the standard library (tests/sw/units/test_plot.py)."""


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to (the longest matching rule), or None when no rule names it."""
    for name in sorted((*ALLOWED, *TOP), key=len, reverse=True):
        if module == name or module.startswith(name + "."):
            return name
    return None


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_project_module(dotted: str) -> bool:
    base = REPO.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute dotted name) of every import in one file; ``from a import b`` names ``a.b`` when that is a
    module of the project, and relative imports are resolved against the file's package."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            named = {f"{target}.{a.name}" for a in node.names}
            for name in sorted({n if _is_project_module(n) else target for n in named}):
                yield node.lineno, name


def function_level_lines(path: Path) -> set[int]:
    """Lines of the imports that stand inside a function of the file (run when it is called, not when imported)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {node.lineno for fn in ast.walk(tree) if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(fn) if isinstance(node, ast.Import | ast.ImportFrom)}


def violations_in(path: Path) -> Iterator[str]:
    """One ``file:line: rule`` message per import that breaks a rule of the README's layering."""
    rel = path.relative_to(REPO)
    source = layer_of(_module_name(path))
    if source is None:
        if _module_name(path) not in PACKAGES:          # the bare package roots (sw/__init__.py) hold no code
            yield f"{rel}:1: belongs to no layer: add its rule to tests/test_layering.py and the README's Layers"
        return
    if source in TOP:
        return
    for line, target in imports_of(path):
        root = target.split(".")[0]
        if root in PACKAGES:
            if target == root and root == "sw":
                continue
            dest = layer_of(target)
            if dest == source or dest in LEAVES:
                continue
            if dest in TOP:
                yield f"{rel}:{line}: {source} imports {target}: nothing below the top imports {dest}"
            elif dest is None or dest not in ALLOWED[source]:
                allowed = ", ".join((*ALLOWED[source], *LEAVES))
                yield f"{rel}:{line}: {source} imports {target}: {source} may import only {allowed}"
        elif root in THIRD_PARTY_HOME and source not in THIRD_PARTY_HOME[root]:
            yield f"{rel}:{line}: {source} imports {target}: only {' and '.join(THIRD_PARTY_HOME[root])} may"
        elif DRAWS_LAZILY.get(_module_name(path)) == root and line in function_level_lines(path):
            continue
        elif source in PURE and root != "__future__" and root not in sys.stdlib_module_names:
            yield f"{rel}:{line}: {source} imports {target}: {source} imports only the standard library and leaves"


def library_files() -> list[Path]:
    return sorted(p for top in PACKAGES for p in (REPO / top).rglob("*.py"))


def test_every_import_points_down() -> None:
    files = library_files()
    assert len(files) > 150, "the scan found too few modules: is REPO right?"
    bad = [msg for path in files for msg in violations_in(path)]
    assert not bad, f"{len(bad)} layering violations (README, Layers):\n" + "\n".join(bad)


def test_the_rules_catch_what_they_forbid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each kind of violation is reported with its file:line and the rule: a function-level upward import, a
    relative one into a sibling layer, an import of the top, a third-party package out of its layer."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "sw" / "cc").mkdir(parents=True)
    (tmp_path / "sw" / "roce").mkdir()
    (tmp_path / "sw" / "cli").mkdir()
    (tmp_path / "sw" / "roce" / "nic.py").write_text("")
    (tmp_path / "sw" / "cli" / "__init__.py").write_text("")
    model = tmp_path / "sw" / "cc" / "model.py"
    model.write_text("import math\n\n\ndef f():\n    from ..roce import nic\n    import numpy\n")
    emu = tmp_path / "emu" / "net.py"
    emu.parent.mkdir()
    emu.write_text("import mininet.net\nfrom sw import cli\nimport amaranth\n")
    assert list(violations_in(model)) == [
        "sw/cc/model.py:5: sw.cc imports sw.roce.nic: sw.cc may import only sw.clock, sw.units",
        "sw/cc/model.py:6: sw.cc imports numpy: sw.cc imports only the standard library and leaves",
    ]
    assert list(violations_in(emu)) == [
        "emu/net.py:2: emu imports sw.cli: nothing below the top imports sw.cli",
        "emu/net.py:3: emu imports amaranth: only hw may",
    ]
    plot = tmp_path / "sw" / "units" / "plot.py"
    plot.parent.mkdir()
    plot.write_text("import matplotlib\n\n\ndef f():\n    import matplotlib.pyplot\n    import numpy\n")
    assert list(violations_in(plot)) == [      # the lazy matplotlib import is the one allowed
        "sw/units/plot.py:1: sw.units imports matplotlib: sw.units imports only the standard library and leaves",
        "sw/units/plot.py:6: sw.units imports numpy: sw.units imports only the standard library and leaves",
    ]


def test_cc_models_read_no_wall_clock() -> None:
    """sw.cc is pure models: time comes in as arguments, never from the wall clock (its CLI reports its own run
    time only)."""
    for path in sorted((REPO / "sw" / "cc").glob("*.py")):
        if path.name == "cli.py":
            continue
        text = path.read_text(encoding="utf-8")
        assert "time.time(" not in text and "time.sleep(" not in text and "perf_counter" not in text, path.name
