"""One congestion-controlled ``hil run`` from a test: the CLI's flags parsed as
``starpulse hil run`` parses them, the model built once, the JSON kept in the test's directory (``out.json``) for a
failure's post-mortem, and what every such run must show checked: nothing left behind, every RTL frame received good
and in order, nothing dropped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sw.apps.hil.model import HilSizes, ensure_model

# hil run's default fabric with one server per leaf: the RTL on s0 and its receiver s1 alone (no software senders)
RTL_ALONE = ("--servers", "2")


def run_cc(tmp_path: Path, cc: str, *, duration: str = "0.6ms", link_rate: str = "4G",
           bad_icrc_probe: bool = False, rtl_alone: bool = True) -> dict[str, Any]:
    """``starpulse hil run --link-rate LINK_RATE --duration DURATION --cc CC`` with the RTL on s0 (``run_hil``'s
    ``bad_icrc_probe`` on request), on ``RTL_ALONE``'s fabric or (``rtl_alone=False``) the default one, where two
    software senders send beside the RTL; its JSON."""
    from emu.cli import fabric_options
    from sw.apps.hil.cli import add_run_arguments
    from sw.apps.hil.fabric_run import run_hil
    from sw.units.cli_guard import ArgumentParser

    ensure_model(HilSizes())
    parser = ArgumentParser(prog="starpulse hil run")
    add_run_arguments(parser)
    args = parser.parse_args([*(RTL_ALONE if rtl_alone else ()), "--link-rate", link_rate, "--duration", duration,
                              "--cc", cc])
    out = run_hil(fabric_options(args), hil_host="s0", cc=cc, duration_ns=args.duration, dilation=None,
                  workdir=tmp_path, bad_icrc_probe=bad_icrc_probe)
    (tmp_path / "out.json").write_text(json.dumps(out, indent=1))
    assert out["leftovers"] == [], "the run's processes, namespaces and interfaces must be gone"
    rx = out["receiver"]
    assert rx["frames"] == rx["icrc_ok"] == rx["payload_ok"] == rx["psn_in_order"] == out["frames"], rx
    assert out["drops"] == 0 and out["fabric_drops"] == 0
    return out
