"""The software NIC: the engine that runs QPs on a frame port, raw-socket and in-memory ports, the per-QP pacer,
host PFC, routing, and the register driver of the RTL NIC."""
