"""Where a fabric lost packets: every drop counter by place (switch port, switch program, host NIC, host UDP
sockets), read before and after a check, and the places whose counters grew in between."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from emu.status import ControlAddressError, drop_reasons, host_drops, parse_port_stats

if TYPE_CHECKING:
    from emu.fabric import Fabric

PORT_DROP_COUNTERS = ("rx_kernel_drops", "queue_drop_pkts", "pipeline_drop_pkts", "no_port_drop_pkts")


def loss_counters(fab: Fabric) -> dict[str, int]:
    """Every drop counter of the fabric by place: ``"leaf0 port 3 rx_kernel_drops"``, ``"leaf0 parser"``,
    ``"s0 s0-eth1 rx_dropped"``, ``"s0 udp_rcvbuf_errors"``; switches that do not answer are left out."""
    out: dict[str, int] = {}
    for name, sw in fab.net.switches.items():
        if not sw.alive():
            continue
        try:
            if fab.backend == "embedded":
                for port, s in parse_port_stats(sw.cli("port_stats")).items():
                    out.update({f"{name} port {port} {k}": s.get(k, 0) for k in PORT_DROP_COUNTERS})
            out.update({f"{name} {reason}": n for reason, n in drop_reasons(sw).items()})
        except (OSError, ControlAddressError):
            continue     # its control socket refused or timed out: the switches check names it
    for host, h in host_drops(fab).items():
        out[f"{host} udp_rcvbuf_errors"] = h["udp_rcvbuf_errors"]
        for ifname, nic in h["nics"].items():
            out[f"{host} {ifname} rx_dropped"] = nic["rx_dropped"]
    return out


def loss_places(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """The places whose drop counter grew from ``before`` to ``after`` and by how much, largest first."""
    grown = {k: v - before.get(k, 0) for k, v in after.items() if v > before.get(k, 0)}
    return dict(sorted(grown.items(), key=lambda kv: (-kv[1], kv[0])))


def loss_summary(places: dict[str, int], fidelity: dict[str, Any], limit: int = 8) -> str:
    """One line: where packets were lost (or that no counter grew) and the fidelity verdict."""
    if places:
        shown = ", ".join(f"{k} +{v}" for k, v in list(places.items())[:limit])
        where = f"lost at: {shown}{' ...' if len(places) > limit else ''}"
    else:
        where = "no drop counter grew (not lost in a ring, queue, program or host socket: late or never sent)"
    return f"{where}; {fidelity_verdict(fidelity)}"


def fidelity_verdict(fidelity: dict[str, Any]) -> str:
    """``fidelity ok``, or which component was late for what share of its events (a starved CPU)."""
    if fidelity.get("ok", True):
        return "fidelity ok"
    return (f"fidelity NOT ok: {fidelity.get('worst_component')} late for "
            f"{fidelity.get('late_share', 0) * 100:.2f} % of its events (CPU starved)")
