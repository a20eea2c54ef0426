"""Print the deepest register-to-register path of an RTL block, cell by cell (timing-closure debugging aid).

Usage: ``.venv/bin/python -m hw.tools.worst_path BLOCK [WORKDIR]`` (or ``scripts/hw_worst_path.py``, the same) with
BLOCK a ``hw.tools.blocks`` name or ``hpcc_feeder`` (``hw.int_ack.HpccAckFeeder`` alone).  Levels and depths
come from ``hw.tools.synth.cell_depths``, the walk ``logic_levels`` uses.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from amaranth.back import verilog

from hw.int_ack import HpccAckFeeder
from hw.tools.blocks import BLOCKS, build
from hw.tools.synth import cell_depths, cell_weight, net_drivers, synthesize


def net_names(mod: dict) -> dict[int, str]:
    """Net bit -> a readable name (a user-given name before yosys's ``$`` names), for printing paths."""
    names: dict[int, str] = {}
    for name, n in mod["netnames"].items():
        for i, bit in enumerate(n["bits"]):
            if isinstance(bit, int) and (bit not in names or (names[bit].startswith("$")
                                                               and not name.startswith("$"))):
                names[bit] = f"{name}[{i}]"
    return names


def worst_path(netlist: dict, top: str) -> list[tuple[str, str, float, str]]:
    """(cell, type, depth, driven net) from the path's start to its end, for the deepest path."""
    mod = netlist["modules"][top]
    cells = mod["cells"]
    net_name = net_names(mod)
    depth, best = cell_depths(cells)
    end = max(depth, key=depth.get)
    path = []
    cur: str | None = end
    while cur is not None:
        cell = cells[cur]
        outs = [b for p, bits in cell["connections"].items()
                if cell["port_directions"].get(p) == "output" for b in bits if isinstance(b, int)]
        path.append((cur, cell["type"], depth[cur], net_name.get(outs[0], "?") if outs else "?"))
        cur = best.get(cur)
    path.reverse()
    # the register(s) feeding the first cell
    first = cells[path[0][0]]
    srcs = sorted({net_name.get(b, "?") for p, bits in first["connections"].items()
                   if first["port_directions"].get(p) == "input" for b in bits if isinstance(b, int)})
    print("path starts from:", ", ".join(srcs[:12]))
    last_outs = {b for p, bits in cells[end]["connections"].items()
                 if cells[end]["port_directions"].get(p) == "output" for b in bits if isinstance(b, int)}
    sinks = set()
    for cell in cells.values():
        if cell_weight(cell["type"]) is None:
            for p, bits in cell["connections"].items():
                if cell["port_directions"].get(p) == "input" and last_outs & set(bits):
                    q = [b for qp, qb in cell["connections"].items()
                         if cell["port_directions"].get(qp) == "output" for b in qb if isinstance(b, int)]
                    sinks.add(f"{cell['type']}:{net_name.get(q[0], '?') if q else '?'}")
    print("path ends at:", ", ".join(sorted(sinks)[:12]))
    return path


def deep_endpoints(netlist: dict, top: str, min_levels: float) -> list[tuple[float, str, str, list[str]]]:
    """(depth, start net, end net, nets along the path) of every path ending in a register at ``min_levels`` or
    deeper, one per end register."""
    mod = netlist["modules"][top]
    cells = mod["cells"]
    net_name = net_names(mod)
    driver = net_drivers(cells)
    depth, best = cell_depths(cells)
    found: list[tuple[float, str, str, list[str]]] = []

    def out_net(cell_name: str) -> str:
        c = cells[cell_name]
        outs = [b for p, bits in c["connections"].items()
                if c.get("port_directions", {}).get(p) == "output" for b in bits if isinstance(b, int)]
        return f"{c['type']}:{net_name.get(outs[0], '?')}" if outs else c["type"]
    for name, cell in cells.items():
        if cell_weight(cell["type"]) is not None:
            continue
        ins = [b for p, bits in cell["connections"].items()
               if cell.get("port_directions", {}).get(p) == "input" for b in bits if isinstance(b, int)]
        srcs = [driver[b] for b in ins if b in driver and cell_weight(cells[driver[b]]["type"]) is not None]
        if not srcs:
            continue
        worst = max(srcs, key=lambda c: depth.get(c, 0.0))
        if depth.get(worst, 0.0) < min_levels:
            continue
        cur = worst
        chain = [out_net(cur)]
        while best.get(cur):
            cur = best[cur]
            chain.append(out_net(cur))
        first_ins = [b for p, bits in cells[cur]["connections"].items()
                     if cells[cur]["port_directions"].get(p) == "input" for b in bits if isinstance(b, int)]
        start = sorted({net_name.get(b, "?") for b in first_ins})
        outs = [b for p, bits in cell["connections"].items()
                if cell.get("port_directions", {}).get(p) == "output" for b in bits if isinstance(b, int)]
        found.append((depth[worst], ",".join(start[:3]), net_name.get(outs[0], name) if outs else name,
                      chain[::-1]))
    return sorted(found, reverse=True)


def main(prog: str = "python -m hw.tools.worst_path") -> None:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("block", choices=[*BLOCKS, "hpcc_feeder"], help="hw.tools.blocks name, or hpcc_feeder")
    ap.add_argument("workdir", nargs="?", help="where to keep the Verilog and netlist (default: a temp dir)")
    ap.add_argument("--deeper-than", type=float, default=None, metavar="LEVELS",
                    help="also list every register fed by a path deeper than LEVELS (one line per register)")
    ap.add_argument("--show", metavar="TEXT", help="with --deeper-than: print the nets along the listed paths "
                    "whose start or end contains TEXT")
    ap.add_argument("--netlist", action="store_true", help="reuse WORKDIR's netlist instead of synthesizing")
    args = ap.parse_args()
    block = args.block
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="worst-path-"))
    work.mkdir(parents=True, exist_ok=True)
    if not args.netlist:
        dut = HpccAckFeeder() if block == "hpcc_feeder" else build(block)
        (work / f"{block}.v").write_text(verilog.convert(dut, name=block, emit_src=False))
        res = synthesize(work / f"{block}.v", block, work)
        print(json.dumps(res.as_dict()))
    netlist = json.loads((work / f"{block}.net.json").read_text())
    for _name, typ, d, net in worst_path(netlist, block):
        print(f"{d:5.1f}  {typ:10s} -> {net}")
    if args.deeper_than is not None:
        for d, start, end, chain in deep_endpoints(netlist, block, args.deeper_than + 0.01):
            print(f"{d:5.1f}  {start}  ->  {end}")
            if args.show and (args.show in start or args.show in end):
                print("        " + "\n        ".join(chain))


if __name__ == "__main__":
    main()
