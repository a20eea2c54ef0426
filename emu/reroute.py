"""Routes of a fabric with failed links: ECMP groups shrink to the spines that still reach each destination.

``DegradedTopology`` is the ``Topology`` with a set of down leaf-spine links; ``emu.control_plane`` derives its table
entries exactly as for the healthy fabric, and ``route_commands`` turns them into the commands that replace a
switch's routing tables in place.
"""

from __future__ import annotations

from emu.control_plane import switch_commands
from sw.collectives.fabric_topology import Route, Switch, Topology, TopologySpec, switch_port_mac

ROUTE_TABLES = ("FabricIngress.ipv4_lpm", "FabricIngress.ipv6_lpm", "FabricIngress.ecmp_group")


def link_key(a: str, b: str) -> frozenset[str]:
    """An unordered pair of node names naming one link."""
    return frozenset((a, b))


class DegradedTopology(Topology):
    """The topology with some leaf-spine links down: routes avoid them (host links have no alternative)."""

    def __init__(self, spec: TopologySpec, down_links: set[frozenset[str]] | None = None) -> None:
        super().__init__(spec)
        self.down_links = set(down_links or ())

    def _live_spines(self, leaf: Switch) -> list[int]:
        return [k for k, sp in enumerate(self.spines) if link_key(leaf.name, sp.name) not in self.down_links]

    def _ecmp(self, leaf: Switch, spine_indexes: list[int]) -> tuple[tuple[int, ...], tuple[str, ...]]:
        ports = tuple(self.uplink_port(k) for k in spine_indexes)
        macs = tuple(switch_port_mac(self.spines[k].device_id, self.spine_port(leaf.pod or 0, leaf.rail or 0))
                     for k in spine_indexes)
        return ports, macs

    def routes(self, switch: str) -> list[Route]:
        if not self.down_links:
            return super().routes(switch)
        sw = self.switch(switch)
        if sw.role == "spine":
            return [r for r in super().routes(switch)
                    if link_key(sw.name, self._leaf_of_prefix(r.prefix).name) not in self.down_links]
        out = [r for r in super().routes(switch) if r.prefix_len == 32]
        if not self.spines:
            return out
        live = self._live_spines(sw)
        if live:
            out.append(Route("10.0.0.0", 8, *self._ecmp(sw, live)))
        for other in self.leaves:
            if other is sw:
                continue
            usable = [k for k in live if k in self._live_spines(other)]
            if usable != live and usable:
                out.append(Route(f"10.{other.pod}.{other.rail}.0", 24, *self._ecmp(sw, usable)))
        return out

    def _leaf_of_prefix(self, prefix: str) -> Switch:
        _, pod, rail, _ = prefix.split(".")
        return self.leaf_of(int(pod), int(rail))


def route_commands(topo: Topology, switch: str) -> list[str]:
    """Commands that clear and refill one switch's routing tables (LPM + ECMP groups) for ``topo``."""
    keep = [c for c in switch_commands(topo, switch) if c.split()[1] in ROUTE_TABLES]
    return [f"table_clear {t}" for t in ROUTE_TABLES] + keep
