"""``starpulse ops report OUT.html``: the operator's page of one fabric run, written as ONE self-contained HTML file
(inline CSS, JS and SVG; no network).  The page draws the fabric from the store's topology with its links coloured
by utilisation, queue depth or loss at each switch poll (a time slider), each rank's step timeline, and the
diagnosis of a window (``sw.ops``) with its suspects' places highlighted and the store's injected faults marked.

The data go into the page as one JSON blob (``report_data``); the drawing is the template ``ops_report.html``.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from sw.apps.ops_cli import OpsError, expected_of, open_store, parse_calibration, window_diagnosis, window_start_ns
from sw.units import float_flag
from sw.units.telemetry import TelemetryStore

TEMPLATE = Path(__file__).with_name("ops_report.html")
DATA_MARK = "__OPS_REPORT_DATA__"
CLEARING_ACTIONS = ("link_up", "restore_link", "switch_start", "restore_gpu", "restore_nic", "uncongest",
                    "restore_pfc")
"""Fault-injector actions that end a fault: listed on the page, never marked as a fault's place."""
_RANK_RE = re.compile(r"rank (\d+)")
_PORT_RE = re.compile(r"(\S+) port (\d+)")
_NIC_RE = re.compile(r"-eth(\d+)$")
_HOST_RAIL_RE = re.compile(r"(\S+):(\d+)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``ops report``'s own arguments (the store selection, ``--since`` and ``--calibrate`` are ``ops_cli``'s)."""
    p.add_argument("out", metavar="OUT.html", help="the page to write (one self-contained HTML file)")
    p.add_argument("--until", type=float_flag(0, 1e9, unit="seconds"), default=None, metavar="T",
                   help="end the diagnosed window T network seconds after the run's start (default: the store's end)")


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    with open_store(args) as store:
        data = report_data(store, args.since, args.until, parse_calibration(args.calibrate))
    write_report(out, data)
    n = len(data["diagnosis"]["suspects"])
    print(f"wrote {out}: {len(data['nodes'])} nodes, {len(data['links'])} links, {len(data['times_s'])} polls, "
          f"{len(data['steps'])} rank-steps, {n} suspect(s)")
    return 0


def write_report(out: Path, data: dict[str, Any]) -> None:
    """The template with ``data`` as its JSON blob (``</`` escaped so no string can end the script element)."""
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    page = TEMPLATE.read_text().replace(DATA_MARK, blob, 1)
    try:
        out.write_text(page)
    except OSError as exc:
        raise OpsError(f"{out}: cannot write the report there ({exc.strerror or exc})") from None


def report_data(store: TelemetryStore, since_s: float | None, until_s: float | None,
                calibration: tuple[int, int]) -> dict[str, Any]:
    """Everything the page shows, from one store: topology, per-poll link series, steps, diagnosis, faults."""
    meta = store.meta()
    origin_ns = int(meta.get("origin_ns", 0))
    diagnosis = diagnose_between(store, since_s, until_s, calibration)
    polls = store.port_polls()
    nodes, links = fabric_of(meta.get("links") or [], polls)
    ranks = sorted({(s["rank"], s["server"], s["gpu"]) for s in store.steps()})
    times_ns, series = link_series(links, polls, meta.get("topology", {}).get("link_rate_bps"))
    ids = _Places(nodes, links, {r for r, _, _ in ranks}, polls)
    since_ns = diagnosis["window"]["since_ns"]
    until_ns = diagnosis["window"].get("until_ns")
    faults = [{"t_s": (f["t_ns"] - origin_ns) / 1e9, "action": f["action"], "target": f["target"],
               "value": f["value"], "place": fault_place(f["target"]),
               "clears": f["action"] in CLEARING_ACTIONS,
               "in_window": since_ns <= f["t_ns"] <= (until_ns if until_ns is not None else 2**62),
               "targets": [] if f["action"] in CLEARING_ACTIONS else ids.of(fault_place(f["target"]))}
              for f in store.faults()]
    for i, s in enumerate(diagnosis["suspects"], 1):
        s["rank_in_diagnosis"] = i
        s["targets"] = ids.of(s["place"])
    end_ns = until_ns if until_ns is not None else (times_ns[-1] if times_ns else since_ns)
    start_index = max([i for i, t in enumerate(times_ns) if t <= end_ns], default=0)
    return {
        "store": str(store.path), "topology": meta.get("topology", {}), "time_dilation": meta.get("time_dilation"),
        "fidelity": meta.get("fidelity"), "interval_wall_s": meta.get("interval_wall_s"),
        "nodes": nodes, "links": links,
        "ranks": [{"rank": r, "server": f"s{srv}", "gpu": g} for r, srv, g in ranks],
        "times_s": [round((t - origin_ns) / 1e9, 6) for t in times_ns], "series": series,
        "switch_state": switch_states(store.switch_polls(), times_ns),
        "steps": [[s["rank"], s["step"], round((s["t0_ns"] - origin_ns) / 1e9, 6),
                   round((s["t1_ns"] - origin_ns) / 1e9, 6), round(s["compute_ns"] / 1e9, 6),
                   round(max(s["exposed_comm_ns"] - s["wait_ns"], 0) / 1e9, 6), round(s["wait_ns"] / 1e9, 6)]
                  for s in store.steps()],
        "window": {"since_s": (since_ns - origin_ns) / 1e9,
                   "until_s": None if until_ns is None else (until_ns - origin_ns) / 1e9,
                   "steps": diagnosis["window"]["steps"]},
        "diagnosis": diagnosis, "faults": faults, "start_index": start_index,
    }


def diagnose_between(store: TelemetryStore, since_s: float | None, until_s: float | None,
                     calibration: tuple[int, int]) -> dict[str, Any]:
    """``ops diagnose``'s window (``--since``, default the last steps), ended at ``--until`` when given."""
    exp = expected_of(store, calibration)
    since_ns = window_start_ns(store, exp, since_s) if since_s is not None or until_s is None else exp.until_ns
    until_ns = None if until_s is None else int(store.meta().get("origin_ns", 0) + until_s * 1e9)
    if until_ns is not None and until_ns <= since_ns:
        start_s = (since_ns - store.meta().get("origin_ns", 0)) / 1e9
        raise OpsError(f"--until {until_s:g}: must be after the window's start ({start_s:g} s after the run's start)")
    return window_diagnosis(store, exp, store.meta().get("links", []), since_ns, until_ns)


def fabric_of(meta_links: list[dict[str, Any]], polls: list[dict[str, Any]]) -> tuple[list[dict[str, Any]],
                                                                                       list[dict[str, Any]]]:
    """Nodes (id, role: server / leaf / spine) and links (id, ends, kind, rate, the server's NIC) from the store's
    recorded links, or, in a store without them, from its port polls (a switch port's peer that never polls is a
    server; a switch with a server peer is a leaf, any other a spine; their rate is then the topology's)."""
    links = [dict(lk) for lk in meta_links] or _links_from_polls(polls)
    role: dict[str, str] = {}
    for lk in links:
        if lk["kind"] == "host-leaf":
            role[lk["a"]], role[lk["b"]] = "server", "leaf"
    for lk in links:
        if lk["kind"] != "host-leaf":
            role.setdefault(lk["a"], "leaf")
            role.setdefault(lk["b"], "spine")
    nic_order: dict[str, list[str]] = defaultdict(list)
    out = []
    for lk in links:
        nic = None
        if lk["kind"] == "host-leaf":
            m = _NIC_RE.search(lk.get("a_ifname") or "")
            nic_order[lk["a"]].append(lk["b"])
            nic = int(m.group(1)) if m else len(nic_order[lk["a"]]) - 1
        out.append({"id": link_id(lk["a"], lk["b"]), "a": lk["a"], "b": lk["b"], "kind": lk["kind"],
                    "rate_bps": lk.get("rate_bps"), "nic": nic})
    nodes = [{"id": f"node-{n}", "name": n, "role": r} for n, r in sorted(role.items(), key=lambda x: _natural(x[0]))]
    return nodes, out


def _links_from_polls(polls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    switches = {p["switch"] for p in polls}
    hosts = {p["peer"] for p in polls if p["peer"] and p["peer"] not in switches}
    leaves = {p["switch"] for p in polls if p["peer"] in hosts}
    seen: dict[frozenset[str], dict[str, Any]] = {}
    for p in polls:
        sw, peer = p["switch"], p["peer"]
        if not peer or frozenset((sw, peer)) in seen:
            continue
        if peer in hosts:
            lk = {"a": peer, "b": sw, "kind": "host-leaf"}
        else:
            leaf, spine = (sw, peer) if sw in leaves else (peer, sw)
            lk = {"a": leaf, "b": spine, "kind": "leaf-spine"}
        seen[frozenset((sw, peer))] = lk
    return sorted(seen.values(), key=lambda lk: (lk["kind"], _natural(lk["a"]), _natural(lk["b"])))


def _natural(name: str) -> tuple[Any, ...]:
    """``s2`` before ``s10``: digit runs compare as numbers."""
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name))


def link_id(a: str, b: str) -> str:
    return f"link-{a}--{b}"


def fault_place(target: str) -> str:
    """The place a fault-injector target names, spelled as the diagnosis spells places: ``N`` is ``rank N``,
    ``host:RAIL`` (``pfc_storm s1:0``) the NIC ``s1-eth0``, ``a:b`` the link ``a<->b``, anything else a node."""
    if target.strip().isdigit():
        return f"rank {int(target)}"
    m = _HOST_RAIL_RE.fullmatch(target)
    if m:
        return f"{m.group(1)}-eth{m.group(2)}"
    a, sep, b = target.partition(":")
    return f"{a}<->{b}" if sep else target


class _Places:
    """Diagnosis places (``rank N``, ``a<->b``, ``switch port N``, a NIC ``s1-eth0``, a node) -> the ids of their
    drawn elements."""

    def __init__(self, nodes: list[dict[str, Any]], links: list[dict[str, Any]], ranks: set[int],
                 polls: list[dict[str, Any]]) -> None:
        self.nodes = {n["name"] for n in nodes}
        self.links = [(lk["a"], lk["b"]) for lk in links]
        self.ranks = ranks
        self.peer = {(p["switch"], p["port"]): p["peer"] for p in polls}
        self.nic_links = {f"{lk['a']}-eth{lk['nic']}": lk["id"] for lk in links if lk.get("nic") is not None}

    def of(self, place: str) -> list[str]:
        m = _RANK_RE.fullmatch(place)
        if m:
            return [f"rank-{m.group(1)}"] if int(m.group(1)) in self.ranks else []
        m = _PORT_RE.fullmatch(place)
        if m and self.peer.get((m.group(1), int(m.group(2)))):
            return self.of(f"{m.group(1)}<->{self.peer[(m.group(1), int(m.group(2)))]}")
        if "<->" in place:
            ends = set(place.split("<->"))
            return [link_id(a, b) for a, b in self.links if {a, b} == ends]
        if place in self.nic_links:            # a NIC (``s1-eth0``): its link to the leaf
            return [self.nic_links[place]]
        return [f"node-{place}"] if place in self.nodes else []


def link_series(links: list[dict[str, Any]], polls: list[dict[str, Any]], default_rate_bps: float | None
                ) -> tuple[list[int], dict[str, dict[str, list[Any]]]]:
    """Per poll time and link: utilisation (the busier direction's tx bits over the interval, a share of the link's
    rate), the deeper sampled queue (packets), loss (drops over packets sent and dropped in the interval) and
    whether both ends were up; ``None`` where no end of the link was polled (or its counters restarted)."""
    times = sorted({p["t_ns"] for p in polls})
    index = {t: i for i, t in enumerate(times)}
    by_ends = {frozenset((lk["a"], lk["b"])): lk for lk in links}
    series = {lk["id"]: {k: [None] * len(times) for k in ("util", "queue", "loss", "up")} for lk in links}
    drops: dict[str, list[list[int]]] = {lk["id"]: [[0, 0, 0] for _ in times] for lk in links}
    prev: dict[tuple[str, int], dict[str, Any]] = {}
    for p in polls:
        lk = by_ends.get(frozenset((p["switch"], p["peer"])))
        last = prev.get((p["switch"], p["port"]))
        prev[(p["switch"], p["port"])] = p
        if lk is None:
            continue
        s, i = series[lk["id"]], index[p["t_ns"]]
        s["queue"][i] = max(s["queue"][i] or 0, p["qdepth_pkts"])
        s["up"][i] = int(bool(p["up"]) and s["up"][i] != 0)
        if last is None or p["t_ns"] <= last["t_ns"] or p["tx_bytes"] < last["tx_bytes"] or p["drops"] < last["drops"]:
            continue
        rate = lk.get("rate_bps") or default_rate_bps
        if rate:
            util = (p["tx_bytes"] - last["tx_bytes"]) * 8 / ((p["t_ns"] - last["t_ns"]) / 1e9) / rate
            s["util"][i] = round(max(s["util"][i] or 0.0, util), 4)
        d = drops[lk["id"]][i]
        d[0] += p["drops"] - last["drops"]
        d[1] += max(p["tx_pkts"] - last["tx_pkts"], 0)
        d[2] = 1
    for lid, per in drops.items():
        for i, (dropped, sent, seen) in enumerate(per):
            if seen:
                series[lid]["loss"][i] = round(dropped / max(dropped + sent, 1), 5)
    return times, series


def switch_states(switch_polls: list[dict[str, Any]], times_ns: list[int]) -> dict[str, list[str | None]]:
    """Per switch, its state at each port-poll time (the latest switch poll at or before it)."""
    by_switch: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for p in switch_polls:
        by_switch[p["switch"]].append((p["t_ns"], p["state"]))
    out: dict[str, list[str | None]] = {}
    for name, rows in by_switch.items():
        states: list[str | None] = []
        j, cur = 0, None
        for t in times_ns:
            while j < len(rows) and rows[j][0] <= t:
                cur = rows[j][1]
                j += 1
            states.append(cur)
        out[name] = states
    return out

