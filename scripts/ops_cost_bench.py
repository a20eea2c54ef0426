"""What the operations collection costs the emulation (issue 18 item 1: < 5 % of its throughput).

    sudo .venv/bin/python scripts/ops_cost_bench.py [--pairs 3] [--steps 8] [--time-dilation 64] [--json]
        [--plot ops_cost.png] [topology flags: --servers 4 --gpus 2 --spines 2 --link-rate 100M]

The same as ``starpulse ops cost`` (``sw.apps.ops_cost``): the campaign's tiny MoE training job on a fresh fabric
with ops off and on, in interleaved pairs at one dilation; per run busbw, steps per second, the switches' packets
per CPU second, the collector's CPU, the store's rows and bytes per second, ``fidelity`` and the load average;
then the ratios on/off with their spread.  Progress lines go to stderr.  Needs root (namespaces).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sw.apps import ops_cost  # noqa: E402
from sw.units.cli_guard import ArgumentParser, call_guarded  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="scripts/ops_cost_bench.py", description=__doc__.splitlines()[0])
    ops_cost.add_arguments(parser)
    return call_guarded("ops_cost_bench", ops_cost.run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
