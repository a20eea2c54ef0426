"""The fabric's topology model, re-exported: it lives in ``sw.collectives.fabric_topology`` (pure) so the
flow-level simulator (``sw.sim``), which must never import ``emu``, builds its fabric from the same description."""

from sw.collectives.fabric_topology import (  # noqa: F401 - re-exported names
    CNP_PRIORITY,
    MAX_MTU,
    MAX_PODS,
    MAX_RAILS,
    MAX_SERVERS_PER_POD,
    MAX_SPINES,
    PFC_PRIORITIES,
    LinkSpec,
    Nic,
    Route,
    Switch,
    Topology,
    TopologyError,
    TopologySpec,
    nic_ip,
    nic_mac,
    switch_port_mac,
)
