"""Fault localization over a window of telemetry, against the run's calibrated ``Expected``: ranked suspects
(kind, place, severity, confidence) each with its evidence chain.

Signals, strongest first: a switch not running (dead switch); a port that went down and came back within the
window (flapping link) or is down (down link); a NIC pacing its port below its line rate (slow NIC); one rank's
NIC in most of the window's retransmissions, with every peer, while no switch port dropped (lossy link); a rank
whose compute per step grew against its own history while its peers' did not, and that its peers waited on (slow
GPU); a port whose queue, ECN marks or drops grew against its healthy level while collectives ran slower than
expected (``Expected.predict_ns``: the calibrated simulator, else alpha-beta) (degraded link, or lossy link when it
drops without queueing; a congested port when it sends at its link's rate, or when a share of what it sends toward
a NIC is not the job's (beyond what the leaf's other NIC ports send) while the others wait on the rank behind it:
another tenant's traffic shares it); a port held by received PFC pauses for most of the window with packets
queued and its egress idle (PFC storm: the NIC or switch at its other end keeps pausing it), whose place's other
suspects are its effects.  INT hop records (sampled reports), where the store has them, join a suspect's
evidence: the hop at its place whose latency or queue grew against healthy.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from .expected import Expected, port_deltas
from .int_evidence import grown_hops

SLOW_GPU_RATIO = 1.2
"""A rank computing this many times its own healthy median (and its peers not) is a slow-GPU suspect."""
COMM_SLOW_RATIO = 1.25
"""Collectives this many times their expected time (median over the window): the network is slow."""
QUEUE_MIN_PKTS = 12
"""A queue this deep (packets, sampled or its high-water mark), 3x its healthy depth: grew (a 1500-byte MTU
buffers only a few packets of a healthy all-to-all burst; a cut link queues tens)."""
ECN_RATIO = 4.0
WAITED_PER_STEP = 2.5
WAITED_SHARE = 0.35
"""A rank posting last more than this many times per step, and in this share of the late posts: waited on."""
DROPS_MIN = 3
RETX_MIN = 4
"""Retransmitted packets in a window (all NICs), and ``RETX_RATIO`` times the healthy rate: something loses frames."""
RETX_RATIO = 4.0
LOSSY_SHARE = 0.75
"""The share of the window's retransmissions one rank's QPs carry (either end) for its NIC's link to be lossy."""
CONGESTED_UTIL = 0.75
"""A growing queue at a port sending at this share of its link's rate or more: more traffic than the link carries
(a congested port), not a slow link."""
FOREIGN_SHARE = 0.4
"""A port toward a NIC of which this share or more of what it sent is not the job's (beyond what its leaf's other
NIC ports send: the job sends every NIC of a rail as much): another tenant's traffic shares it (a congested port)."""
FOREIGN_MIN_UTIL = 0.5
"""... and which sends at this share of its link's rate or more (a rate-cut link sends below its cut)."""
PFC_PAUSED_SHARE = 0.5
"""A port whose egress received PFC pauses held for this share of the window or more, ..."""
PFC_IDLE_UTIL = 0.1
"""... while it sent below this share of its link's rate with packets queued: a PFC storm (stuck pause), not the
short pauses of flow control under an incast, between which traffic moves."""
PFC_STORM_CONFIDENCE = 0.97
"""Received pauses that hold a queue for most of the window are direct evidence: the other rules' suspects at the
same place (a queue that grew, retransmissions, peers waiting) are its effects and join its evidence."""
DOWN_BOTH_ENDS_CONFIDENCE = 0.97
"""A link whose switch ports at both ends report no carrier: observed, not inferred, so it ranks above what its
reroute causes (a few retransmissions on one rank's QPs can look like a lossy link, whose confidence is <= 0.95)."""
NIC_RATE_SHARE = 0.9
"""A NIC pacing its port below this share of its line rate is rate-limited (a slow NIC)."""
TOP = 3


@dataclass
class Suspect:
    """One ranked suspect: fault kind, place (``rank N``, link ``a<->b``, switch, ``switch port N``), how bad
    (severity: the ratio to expected, or 1 for on/off faults) and how sure (0..1), and the evidence."""

    kind: str
    place: str
    severity: float
    confidence: float
    evidence: list[str] = field(default_factory=list)


def link_name(links: list[dict[str, Any]], a: str, b: str) -> str:
    """The link between nodes ``a`` and ``b`` as ``x<->y`` in the topology's own order."""
    for lk in links:
        if {lk["a"], lk["b"]} == {a, b}:
            return f"{lk['a']}<->{lk['b']}"
    return f"{a}<->{b}"


def diagnose(exp: Expected, links: list[dict[str, Any]], steps: list[dict[str, Any]],
             collectives: list[dict[str, Any]], polls: list[dict[str, Any]],
             switch_polls: list[dict[str, Any]], nics: list[dict[str, Any]] | None = None,
             int_hops: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Suspects of the window whose rows are given (steps, collectives, port and switch polls, NIC rows and INT hop
    records since its start), best first; ``symptoms`` are the window's figures against expected."""
    suspects: list[Suspect] = []
    dead = _switches(switch_polls, suspects)
    _link_states(polls, dead, links, suspects)
    _nic_rates(nics or [], steps, links, suspects)
    _lossy_links(exp, nics or [], steps, polls, links, suspects)
    waited_on = _waited_on(collectives)
    symptoms = {"steps": len({s["step"] for s in steps}), "model": exp.model,
                "comm_ratio": _comm_ratio(exp, collectives),
                "step_ratio": _step_ratio(exp, steps), "waited_on": {f"rank {r}": n for r, n in waited_on.items()}}
    slow = _slow_ranks(exp, steps, waited_on, suspects)
    _ports(exp, polls, dead, links, symptoms, suspects, _where(steps, links))
    _slow_nics(steps, waited_on, slow, links, suspects)
    suspects = _fold_into_storms(pfc_storms(polls, dead, links), suspects, links)
    suspects.sort(key=lambda s: (-s.confidence, -s.severity))
    symptoms["int_hop_records"] = len(int_hops or ())
    for s in suspects[:TOP]:            # evidence only: the ranking above stands
        s.evidence += grown_hops(exp.int_ports, int_hops or [], links, s.place)
    return {"suspects": [asdict(s) for s in suspects[:TOP]], "symptoms": symptoms,
            "detected": bool(suspects)}


def _switches(switch_polls: list[dict[str, Any]], out: list[Suspect]) -> set[str]:
    last: dict[str, dict[str, Any]] = {}
    for p in switch_polls:
        last[p["switch"]] = p
    dead = set()
    for name, p in sorted(last.items()):
        if p["state"] != "running":
            dead.add(name)
            out.append(Suspect("dead_switch", name, 1.0, 0.95,
                               [f"switch {name}: state '{p['state']}' at the last poll (t={p['t_ns'] / 1e9:.3f} s)",
                                "its ports are missing from the polls since"]))
    return dead


def _link_states(polls: list[dict[str, Any]], dead: set[str], links: list[dict[str, Any]],
                 out: list[Suspect]) -> None:
    """Per link, from its ports' carrier over the window's polls: it was seen down and then up again (flapping), or
    it is down at the last poll (down)."""
    series: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for p in polls:
        series[(p["switch"], p["port"])].append(p)
    down: dict[str, list[str]] = defaultdict(list)
    flaps: dict[str, list[str]] = defaultdict(list)
    for (sw, port), ps in sorted(series.items()):
        if sw in dead or not ps[-1]["peer"]:
            continue
        ups = [bool(p["up"]) for p in ps]
        fell = sum(1 for a, b in zip(ups, ups[1:], strict=False) if a and not b)
        rose = sum(1 for a, b in zip(ups, ups[1:], strict=False) if not a and b)
        name = link_name(links, sw, ps[-1]["peer"])
        if rose:                # seen down, then up again (it may have gone down just before the first poll)
            flaps[name].append(f"{sw} port {port} (to {ps[-1]['peer']}): carrier went down {fell + (not ups[0])} "
                               f"and came back {rose} time(s) in {len(ps)} polls "
                               f"({(ps[-1]['t_ns'] - ps[0]['t_ns']) / 1e9:.3f} s)" + ("" if ups[-1] else ", down now"))
        elif not ups[-1]:
            down[name].append(f"{sw} port {port} (to {ps[-1]['peer']}) is down")
    for name, ev in flaps.items():
        out.append(Suspect("flapping_link", name, float(len(ev)), 0.92, ev))
    for name, ev in down.items():
        if name not in flaps:
            out.append(Suspect("down_link", name, 1.0, DOWN_BOTH_ENDS_CONFIDENCE if len(ev) > 1 else 0.85, ev))


def nic_name(server: int, gpu: int) -> str:
    """A NIC's place: its interface (``s1-eth0``: server s1's NIC on rail 0)."""
    return f"s{server}-eth{gpu}"


def _where(steps: list[dict[str, Any]], links: list[dict[str, Any]] | None = None) -> dict[int, tuple[int, int]]:
    """Rank -> (server, GPU): from the window's steps, else (a step still running) from the topology's links
    (ranks are server-major: rank = server x GPUs + GPU)."""
    out = {}
    gpus = sum(1 for lk in links or () if lk["a"] == "s0" and lk.get("kind") == "host-leaf")
    servers = len({lk["a"] for lk in links or () if lk.get("kind") == "host-leaf"})
    if gpus:
        out = {r: divmod(r, gpus) for r in range(servers * gpus)}
    out.update({s["rank"]: (s["server"], s["gpu"]) for s in steps})
    return out


def _nic_rates(nics: list[dict[str, Any]], steps: list[dict[str, Any]], links: list[dict[str, Any]],
               out: list[Suspect]) -> None:
    """A NIC whose port paced below ``NIC_RATE_SHARE`` of its line rate at its last report in the window."""
    last: dict[int, dict[str, Any]] = {}
    for n in nics:
        if n["rank"] not in last or n["t_ns"] >= last[n["rank"]]["t_ns"]:
            last[n["rank"]] = n
    where = _where(steps, links)
    for rank, n in sorted(last.items()):
        share = n["rate_bps"] / n["line_rate_bps"] if n["line_rate_bps"] > 0 else 1.0
        if share >= NIC_RATE_SHARE or rank not in where:
            continue
        cnps = sum(x["cnps_rx"] for x in nics if x["rank"] == rank)
        place = nic_name(*where[rank])
        out.append(Suspect("slow_nic", place, round(share, 3), 0.93, [
            f"NIC {place} (rank {rank}) paces its port at {n['rate_bps'] / 1e6:.1f} Mb/s, {100 * share:.0f} % of its "
            f"{n['line_rate_bps'] / 1e6:g} Mb/s line rate (step {n['step']})",
            f"it received {cnps} CNPs in the window: the cut is the NIC's own limit, not congestion control"]))


def _lossy_links(exp: Expected, nics: list[dict[str, Any]], steps: list[dict[str, Any]],
                 polls: list[dict[str, Any]], links: list[dict[str, Any]], out: list[Suspect]) -> None:
    """One rank's QPs carry most of the window's retransmissions, with every peer it sent to, while the switch
    port toward it dropped nothing: frames are lost on its NIC's link (the wire, not a queue)."""
    pair: Counter[frozenset[int]] = Counter()
    tx: Counter[frozenset[int]] = Counter()
    for n in nics:
        key = frozenset((n["rank"], n["peer"]))
        pair[key] += n["retx_pkts"]
        tx[key] += n["tx_pkts"]
    total = sum(pair.values())
    nsteps = max(1, len({n["step"] for n in nics}))
    if not total or total < max(RETX_MIN, RETX_RATIO * exp.retx_per_step * nsteps):
        return
    involved: Counter[int] = Counter()
    for key, v in pair.items():
        for r in key:
            involved[r] += v
    rank, v = involved.most_common(1)[0]
    peers = {p for key in pair if rank in key for p in key - {rank}}
    lossy_peers = {p for key, x in pair.items() if rank in key and x for p in key - {rank}}
    where = _where(steps, links)
    if v < LOSSY_SHARE * total or len(lossy_peers) < min(2, len(peers)) or rank not in where:
        return
    place = nic_link(links, *where[rank])
    server = f"s{where[rank][0]}"
    drops = sum(d["drops"] for (sw, _p), d in port_deltas(polls).items() if d["peer"] == server
                and sw in place.split("<->"))
    if drops * 2 >= v:              # the switch dropped them: a queue (congestion), not the wire
        return
    sent = sum(x for key, x in tx.items() if rank in key)
    share = v / max(sent, 1)
    out.append(Suspect("lossy_link", place, round(100 * share, 2), round(min(0.95, 0.8 + 0.15 * v / total), 3), [
        f"rank {rank} (NIC {nic_name(*where[rank])}): its QPs retransmitted {v} of the window's {total} "
        f"retransmitted packets ({100 * share:.1f} % of the {sent} they sent) over {nsteps} step(s), "
        f"healthy {exp.retx_per_step:.1f} per step",
        f"with {len(lossy_peers)} of its {len(peers)} peers (ranks {', '.join(map(str, sorted(lossy_peers)))}); "
        "retransmissions between other ranks: " + str(total - v),
        f"the switch port toward {server} on {place} dropped {drops} frames: lost on the wire, not in a queue"]))


def _waited_on(collectives: list[dict[str, Any]]) -> Counter[int]:
    """Per rank: in how many collectives of the window it posted last (its peers waited on it)."""
    by_op: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for c in collectives:
        by_op[(c["step"], c["seq"])].append(c)
    out: Counter[int] = Counter()
    for rows in by_op.values():
        if len(rows) > 1:
            last = max(rows, key=lambda c: c["post_ns"])
            others = sorted(c["post_ns"] for c in rows if c is not last)
            if last["post_ns"] - others[len(others) // 2] > 0.5 * max(last["end_ns"] - last["start_ns"], 1):
                out[last["rank"]] += 1      # it posted later than its peers' median by half the op's length
    return out


def _comm_ratio(exp: Expected, collectives: list[dict[str, Any]]) -> float | None:
    ratios = []
    for c in collectives:
        want = exp.predict_ns(c["op"], c["nbytes"], c.get("algo", ""))
        if want is not None and want > 0:
            ratios.append((c["end_ns"] - c["start_ns"]) / want)
    return statistics.median(ratios) if ratios else None


def _step_ratio(exp: Expected, steps: list[dict[str, Any]]) -> float | None:
    per_step: dict[int, int] = defaultdict(int)
    for s in steps:
        per_step[s["step"]] = max(per_step[s["step"]], s["t1_ns"] - s["t0_ns"])
    return statistics.median(per_step.values()) / exp.step_ns if per_step and exp.step_ns > 0 else None


def nic_link(links: list[dict[str, Any]], server: int, gpu: int) -> str:
    """The link of server ``server``'s NIC ``gpu`` (its rail) as ``s<i><->leaf``."""
    name = f"s{server}"
    for lk in links:
        if lk["a"] == name and lk.get("a_ifname", f"{name}-eth{gpu}") == f"{name}-eth{gpu}" \
                and lk.get("kind") == "host-leaf":
            return f"{lk['a']}<->{lk['b']}"
    return f"{name}<->p0l{gpu}"


def _slow_nics(steps: list[dict[str, Any]], waited_on: Counter[int], slow: set[int], links: list[dict[str, Any]],
               out: list[Suspect]) -> None:
    """A rank its peers keep waiting on while its compute is normal: its NIC's link is slow (the peers' data
    to or from it arrives late, so it posts its next collective late)."""
    nsteps = len({s["step"] for s in steps})
    total = sum(waited_on.values())
    where = _where(steps)
    for rank, n in waited_on.most_common(1):
        if rank in slow or rank not in where or n < WAITED_PER_STEP * nsteps + 1 or n < WAITED_SHARE * total:
            continue
        place = nic_link(links, *where[rank])
        ev = [f"its peers waited on rank {rank} (server s{where[rank][0]}, NIC {where[rank][1]}): it posted last in "
              f"{n} of {total} late-posted collectives over {nsteps} step(s)",
              f"rank {rank}'s compute is within its healthy range: the delay is in its communication"]
        port = next((f"{lk['b']} port {lk['b_port']}" for lk in links if "b_port" in lk
                     and lk.get("a_ifname") == nic_name(*where[rank])), None)
        known = next((s for s in out if s.place in (place, nic_name(*where[rank]), port)), None)
        if known is not None:           # its link, leaf port or NIC explains it too: one suspect, both chains
            known.evidence += ev
            known.confidence = round(min(0.97, known.confidence + 0.1), 3)
            continue
        out.append(Suspect("degraded_link", place, round(n / max(nsteps, 1), 2),
                           round(min(0.85, 0.5 + 0.5 * n / max(total, 1)), 3), ev))


def _slow_ranks(exp: Expected, steps: list[dict[str, Any]], waited_on: Counter[int], out: list[Suspect]) -> set[int]:
    per_rank: dict[int, list[float]] = defaultdict(list)
    for s in steps:
        base = exp.compute_ns.get(s["rank"])
        if base:
            per_rank[s["rank"]].append(s["compute_ns"] / base)
    if not per_rank:
        return set()
    ratio = {r: statistics.median(v) for r, v in per_rank.items()}
    slow = set()
    for rank, x in ratio.items():
        peers = [v for r, v in ratio.items() if r != rank] or [1.0]
        peer = statistics.median(peers)
        if x >= SLOW_GPU_RATIO and x >= SLOW_GPU_RATIO * peer:
            waits = waited_on.get(rank, 0)
            total = sum(waited_on.values())
            ev = [f"rank {rank}: compute per step x{x:.2f} of its own healthy median "
                  f"({exp.compute_ns[rank] / 1e6:.2f} ms) over {len(per_rank[rank])} step(s)",
                  f"peers (other ranks, same steps): median x{peer:.2f}",
                  f"its peers waited on it: it posted last in {waits} of {total} late-posted collectives"]
            conf = min(0.99, 0.6 + 0.2 * min(1.0, (x - 1) / 0.5) + (0.19 if waits and waits >= total / 2 else 0.0))
            out.append(Suspect("slow_gpu", f"rank {rank}", round(x, 3), round(conf, 3), ev))
            slow.add(rank)
    return slow


def foreign_shares(deltas: dict[tuple[str, int], dict[str, Any]], links: list[dict[str, Any]],
                   where: dict[int, tuple[int, int]]) -> dict[tuple[str, int], tuple[int, float, float, float]]:
    """Per leaf port toward a NIC: (the rank behind it, the share of what it sent that is not the job's, its rate and
    the job's, in bit/s).  The job's all-to-all and ring allreduce send every NIC of a rail as much, so the job's
    rate into a NIC is the median of its leaf's other NIC ports (at least two of them); what a port sends beyond
    that is foreign traffic (a port sending less, e.g. a cut link, has none)."""
    ranks = {sg: r for r, sg in where.items()}
    host_ports: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
    for lk in links:
        d = deltas.get((lk["b"], lk.get("b_port", -1)))
        ifname = lk.get("a_ifname", "")
        if lk.get("kind") != "host-leaf" or d is None or d["span_ns"] <= 0 or not ifname.startswith(lk["a"] + "-eth"):
            continue
        server, gpu = lk["a"][1:], ifname.rsplit("-eth", 1)[1]
        rank = ranks.get((int(server), int(gpu))) if server.isdigit() and gpu.isdigit() else None
        if rank is not None:
            host_ports[lk["b"]].append((lk["b_port"], rank, d["tx_bytes"] * 8e9 / d["span_ns"]))
    out = {}
    for sw, ports in host_ports.items():
        for port, rank, bps in ports:
            others = [x for p, _r, x in ports if p != port]
            if len(others) < 2 or bps <= 0:
                continue
            job_bps = statistics.median(others)
            out[(sw, port)] = (rank, max(0.0, 1.0 - job_bps / bps), bps, job_bps)
    return out


def _ports(exp: Expected, polls: list[dict[str, Any]], dead: set[str], links: list[dict[str, Any]],
           symptoms: dict[str, Any], out: list[Suspect], where: dict[int, tuple[int, int]] | None = None) -> None:
    """Ports whose queue, ECN marks or drops grew while the job ran slow (or that dropped), by how much: a
    degraded link (a rate cut), a lossy one (drops, no queue), or a congested port (one sending at its link's
    rate, or carrying frames that are not the job's toward a NIC whose rank the others wait on)."""
    comm_slow = (symptoms["comm_ratio"] or 0) >= COMM_SLOW_RATIO or (symptoms["step_ratio"] or 0) >= COMM_SLOW_RATIO
    rates = {frozenset((lk["a"], lk["b"])): lk.get("rate_bps", 0) for lk in links}
    waited = {int(r.split()[1]) for r, n in symptoms.get("waited_on", {}).items() if n}
    deltas = port_deltas(polls)
    shares = foreign_shares(deltas, links, where or {})
    cands = []
    for key, d in deltas.items():
        sw, port = key
        if sw in dead or not d["up"] or not d["peer"] or d["span_ns"] <= 0:
            continue
        base = exp.ports.get(key)
        base_q = base.qdepth_max if base else 0
        base_ecn = base.ecn_per_s if base else 0.0
        ecn_s = d["ecn"] / (d["span_ns"] / 1e9)
        q_score = d["qdepth_max"] / max(base_q, QUEUE_MIN_PKTS / 3)
        ecn_score = ecn_s / max(base_ecn, 1.0)
        ev = []
        if d["qdepth_max"] >= QUEUE_MIN_PKTS and q_score >= 3:
            ev.append(f"{sw} port {port} (to {d['peer']}): queue sampled up to {d['qdepth_max']} pkts "
                      f"(healthy max {base_q})")
        base_hw = base.high_water_pkts if base else 0
        hw_score = d["high_water"] / max(base_hw, QUEUE_MIN_PKTS / 2)
        if d["high_water"] > d["high_water_first"] and d["high_water"] >= QUEUE_MIN_PKTS and hw_score >= 2:
            ev.append(f"{sw} port {port} (to {d['peer']}): queue high-water mark rose to {d['high_water']} pkts "
                      f"in the window (healthy {base_hw})")
            q_score = max(q_score, hw_score)
        if ecn_score >= ECN_RATIO and d["ecn"] >= 10:
            ev.append(f"{sw} port {port}: {ecn_s:.0f} ECN marks/s (healthy {base_ecn:.0f}/s)")
        lossy = d["drops"] >= DROPS_MIN and d["drops"] / (d["span_ns"] / 1e9) > 4 * (base.drops_per_s if base else 0)
        if lossy:
            ev.append(f"{sw} port {port}: {d['drops']} drops in the window")
        rate = rates.get(frozenset((sw, d["peer"])), 0)
        util = d["tx_bytes"] * 8 / (d["span_ns"] / 1e9) / rate if rate else 0.0
        share = shares.get(key)
        shared = share is not None and share[1] >= FOREIGN_SHARE and util >= FOREIGN_MIN_UTIL
        # a queue that slows nothing is load, not a fault; one the job shares with foreign traffic while the
        # others wait on the rank behind it is this port's congestion
        if ev and (comm_slow or lossy or (shared and share is not None and share[0] in waited)):
            cands.append((max(q_score, ecn_score), key, d, ev, lossy, util, rate, share))
    for score, (sw, port), d, ev, lossy, util, rate, share in sorted(cands, key=lambda c: -c[0])[:TOP]:
        if comm_slow:
            ev.append(f"collectives x{symptoms['comm_ratio'] or 0:.2f} of their {exp.model} prediction, steps "
                      f"x{symptoms['step_ratio'] or 0:.2f} of healthy")
        kind = "lossy_link" if lossy and d["qdepth_max"] < QUEUE_MIN_PKTS else "degraded_link"
        conf = min(0.9, 0.4 + 0.1 * min(score, 3.0) + (0.2 if comm_slow else 0.0))
        shared = share is not None and share[1] >= FOREIGN_SHARE and util >= FOREIGN_MIN_UTIL
        if kind == "degraded_link" and (util >= CONGESTED_UTIL or shared):
            if share is not None and share[1] >= FOREIGN_SHARE:
                ev.append(f"{100 * share[1]:.0f} % of what {sw} port {port} sent was not the job's: "
                          f"{share[2] / 1e6:.1f} Mb/s toward rank {share[0]}'s NIC, the job's "
                          f"{share[3] / 1e6:.1f} Mb/s "
                          f"(the median of {sw}'s other NIC ports: the job sends every NIC of a rail as much)")
            ev.append(f"{sw} port {port} sent at {100 * util:.0f} % of its link's {rate / 1e6:g} Mb/s: "
                      + ("more traffic than the link carries, not a slow link" if util >= CONGESTED_UTIL
                         else "above any rate cut, with a queue: its link is shared, not slow"))
            out.append(Suspect("congested_port", f"{sw} port {port}", round(util, 3), round(max(conf, 0.9), 3), ev))
            continue
        out.append(Suspect(kind, link_name(links, sw, d["peer"]), round(score, 2), round(conf, 3), ev))


def pfc_storms(polls: list[dict[str, Any]], dead: set[str], links: list[dict[str, Any]]) -> list[Suspect]:
    """Ports whose received PFC pauses held their egress for ``PFC_PAUSED_SHARE`` of the window or more while
    packets waited and almost nothing left (below ``PFC_IDLE_UTIL`` of the link's rate): the peer keeps pausing it
    (a PFC storm, stuck pause); placed on the link to that peer.  A held port whose peer is a switch with a held
    port of its own only passes the back-pressure on (the storm spreading upstream): it is evidence of the
    storm at the end of the chain, not a storm (all are named when they pause each other in a loop)."""
    deltas = port_deltas(polls)
    rates = {frozenset((lk["a"], lk["b"])): lk.get("rate_bps", 0) for lk in links}
    held: dict[tuple[str, int], tuple[float, float, int]] = {}
    for (sw, port), d in sorted(deltas.items()):
        if sw in dead or not d["peer"] or d["span_ns"] <= 0 or d["pfc_rx"] <= 0:
            continue
        share = min(d["paused_ns"] / d["span_ns"], 1.0)
        rate = rates.get(frozenset((sw, d["peer"])), 0)
        util = d["tx_bytes"] * 8 / (d["span_ns"] / 1e9) / rate if rate else 0.0
        if share >= PFC_PAUSED_SHARE and util < PFC_IDLE_UTIL and d["qdepth_max"] >= 1:
            held[(sw, port)] = (share, util, rate)
    held_switches = {sw for sw, _ in held}
    roots = [k for k in held if deltas[k]["peer"] not in held_switches] or list(held)
    upstream = [f"{sw} port {port} (to {deltas[(sw, port)]['peer']}) {100 * held[(sw, port)][0]:.0f} %"
                for sw, port in held if (sw, port) not in roots]
    out = []
    for sw, port in roots:
        d, (share, util, rate) = deltas[(sw, port)], held[(sw, port)]
        spread = [(p, x["pfc"] - x["pfc_rx"]) for (s2, p), x in sorted(deltas.items())
                  if s2 == sw and p != port and x["pfc"] > x["pfc_rx"]]
        ev = [f"{sw} port {port} (to {d['peer']}): {d['pfc_rx']} PFC pauses received held its egress "
              f"{100 * share:.0f} % of the {d['span_ns'] / 1e9:.3f} s polled",
              f"meanwhile it sent {100 * util:.1f} % of its link's {rate / 1e6:g} Mb/s with up to {d['qdepth_max']} "
              f"pkts queued: stuck, not the short pauses of flow control under load",
              f"the pauses come from {d['peer']}: it keeps pausing a port that has packets for it"]
        if spread:
            ev.append(f"the pause spreads: {sw} paused the senders on {len(spread)} other port(s) "
                      f"({', '.join(f'port {p}: {n}' for p, n in spread)} pauses sent)")
        if upstream:
            ev.append(f"upstream ports held by the spreading back-pressure: {', '.join(upstream)}")
        out.append(Suspect("pfc_storm", link_name(links, sw, d["peer"]), round(share, 3), PFC_STORM_CONFIDENCE, ev))
    return out


def _fold_into_storms(storms: list[Suspect], others: list[Suspect], links: list[dict[str, Any]]) -> list[Suspect]:
    """The storms, then the other suspects; one at a storm's place (its link, or the NIC on it) is an effect of
    the storm: its evidence joins the storm's instead."""
    out = list(storms)
    for s in others:
        storm = next((x for x in storms if _on_link(links, x.place, s.place)), None)
        if storm is None:
            out.append(s)
        else:
            storm.evidence += [f"also seen there ({s.kind}, an effect of the held queue): {line}" for line in
                               s.evidence[:2]]
    return out


def _on_link(links: list[dict[str, Any]], link: str, place: str) -> bool:
    """``place`` names link ``a<->b`` (either order) or the NIC at its server end (``s1-eth0`` on ``s1<->p0l0``)."""
    ends = set(link.split("<->"))
    if "<->" in place:
        return set(place.split("<->")) == ends
    return any(lk.get("a_ifname") == place and {lk["a"], lk["b"]} == ends for lk in links)
