"""Tooling around the NIC RTL: the block registry, the ``starpulse hw`` CLI, the yosys synthesis report and the
worst-path analysis."""
