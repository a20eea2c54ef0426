"""Flow-level simulator of the rail-optimized fabric: the emulator's topology
(``sw.collectives.fabric_topology``), fabric.p4's ECMP hash (``sw.units.crc16``) and the communicator's schedules
(``sw.collectives.algorithms``), at up to 100k GPUs.

Layering: imports ``sw.*`` pure parts, numpy; never ``emu``, ``p4`` or Mininet (tests/unit/test_sim_layering.py).
"""

from sw.sim.run import SimParams, simulate

__all__ = ["SimParams", "simulate"]
