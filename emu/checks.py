"""The path checks of ``starpulse fabric test``: reachability, INT hop counts, ECMP spread, reroute on link down.

Each check returns a ``CheckResult`` (name, pass/fail, a one-line detail and its numbers), so the CLI prints a
summary and tests assert on the same objects.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from emu.loss import fidelity_verdict, loss_counters, loss_places, loss_summary
from sw.collectives.fabric_topology import FabricNic

if TYPE_CHECKING:
    from emu.fabric import Fabric

CHI2_Z_P001 = 3.090   # standard normal quantile for p = 0.001 (upper tail)
ECMP_FLOWS_PER_SPINE = 200
COUNTER_SETTLE_POLLS = 50
COUNTER_POLL_NS = 20_000_000
NO_RETRY_TIMEOUT_MS = 2000   # one try per probe: late (a loaded machine) is not lost
CONGEST_RATE_BPS = 2_000_000
CONGEST_PAYLOAD_BYTES = 200
ETH_IP_UDP_BYTES = 14 + 20 + 8
QUEUE_DEPTH_PKTS = 64       # the switch's default egress queue depth (BMv2's too)
ECN_BIN_PKTS = 5
IP_ICMP_HEADER_BYTES = 20 + 8
IP_UDP_HEADER_BYTES = 20 + 8
MTU_UDP_PACKETS = 3
MTU_UDP_PPS = 100.0
PROBE_PORT_INT = 4791


@dataclass
class CheckResult:
    """One check: did it pass, a one-line human summary, and its measured numbers."""

    name: str
    ok: bool
    detail: str
    data: dict[str, Any] = field(default_factory=dict)


def fabric_pairs(fab: Fabric) -> list[tuple[FabricNic, FabricNic]]:
    """Every NIC pair the fabric carries: all reachable pairs between different servers (same-server pairs
    never touch the fabric: the kernel delivers them locally)."""
    return [(a, b) for a, b in fab.topo.reachable_pairs() if a.server != b.server]


def check_reachability(fab: Fabric, *, retries: int = 4) -> tuple[CheckResult, list[dict[str, Any]]]:
    """Every NIC pair probed; when pairs stay unanswered the detail names the places whose drop counters grew
    during the probes (``emu.loss``) and the fidelity verdict (a starved CPU, not a routing bug)."""
    pairs = fabric_pairs(fab)
    before = loss_counters(fab)
    results = fab.probe([(a.ip, b.ip) for a, b in pairs], retries=retries)
    failed = [f"{r['src']}->{r['dst']}" for r in results if not r["ok"]]
    rail_local = sum(1 for a, b in pairs if a.leaf == b.leaf)
    detail = (f"{len(pairs) - len(failed)}/{len(pairs)} NIC pairs answered ({rail_local} rail-local, "
              f"{len(pairs) - rail_local} cross-rail/cross-pod)")
    rtts = sorted(r["rtt_ns"] for r in results if r["ok"])
    data = {"pairs": len(pairs), "failed": failed, "rail_local_pairs": rail_local,
            "median_rtt_ns": rtts[len(rtts) // 2] if rtts else None}
    if failed:
        places, fid = loss_places(before, loss_counters(fab)), fab.fidelity()
        late = sorted({r["late_prober"] for r in results if "late_prober" in r}, key=lambda s: int(s[1:]))
        detail += f"; unreachable: {', '.join(failed[:8])}{' ...' if len(failed) > 8 else ''}; "
        if late:
            budget_s = next(r["budget_s"] for r in results if "late_prober" in r)
            detail += f"the probers on {', '.join(late)} gave no result within {budget_s} s; "
        detail += loss_summary(places, fid)
        data |= {"loss_places": places, "fidelity": fid, "late_probers": late}
    return CheckResult("reachability", not failed and bool(pairs), detail, data), results


def check_int_hops(fab: Fabric, pairs: list[tuple[FabricNic, FabricNic]], results: list[dict[str, Any]]) -> CheckResult:
    """INT stacks carry one hop per switch crossed: 1 on the rail's leaf, 3 through a spine."""
    wrong = []
    counts: dict[int, int] = {}
    for (a, b), r in zip(pairs, results, strict=True):
        if not r["ok"]:
            continue
        want = fab.topo.path_switch_hops(a, b)
        for direction in ("fwd_hops", "rev_hops"):
            counts[r[direction] or 0] = counts.get(r[direction] or 0, 0) + 1
            if r[direction] != want:
                wrong.append(f"{r['src']}->{r['dst']} {direction}={r[direction]} want {want}")
    detail = "INT hop counts " + ", ".join(f"{h} hop(s): {n}" for h, n in sorted(counts.items()))
    if wrong:
        detail += f"; wrong: {', '.join(wrong[:6])}"
    return CheckResult("int_hops", not wrong and bool(counts), detail, {"hop_histogram": counts, "wrong": wrong})


def chi2_critical(df: int, z: float = CHI2_Z_P001) -> float:
    """Upper critical value of chi-square with ``df`` degrees of freedom (Wilson-Hilferty approximation)."""
    k = 2.0 / (9.0 * df)
    return df * (1.0 - k + z * math.sqrt(k)) ** 3


def cross_rail_pair(fab: Fabric) -> tuple[FabricNic, FabricNic] | None:
    for a, b in fabric_pairs(fab):
        if fab.topo.path_switch_hops(a, b) == 3:
            return a, b
    return None


def _settled_counters(fab: Fabric, switch: str, ports: list[int], target: int, before: dict[int, int]
                      ) -> dict[int, int]:
    """Wait (bounded) until ``target`` more packets left ``ports`` of ``switch``; per-port deltas."""
    delta: dict[int, int] = {}
    for _ in range(COUNTER_SETTLE_POLLS):
        stats = fab.port_counters(switch)
        delta = {p: stats.get(p, {}).get("tx_pkts", 0) - before.get(p, 0) for p in ports}
        if sum(delta.values()) >= target:
            break
        fab.clock.sleep_ns(COUNTER_POLL_NS)
    return delta


def check_ecmp(fab: Fabric, flows: int | None = None) -> CheckResult:
    """Many one-packet flows (distinct UDP source ports) spread over the spines: chi-square vs uniform."""
    spines = fab.topo.spines
    if len(spines) < 2:
        return CheckResult("ecmp_spread", True, f"skipped: {len(spines)} spine(s), nothing to spread over")
    pair = cross_rail_pair(fab)
    if pair is None:
        return CheckResult("ecmp_spread", True, "skipped: no cross-rail pair")
    a, b = pair
    flows = flows or ECMP_FLOWS_PER_SPINE * len(spines)
    uplinks = [fab.topo.uplink_port(k) for k in range(len(spines))]
    stats = fab.port_counters(a.leaf)
    before = {p: stats.get(p, {}).get("tx_pkts", 0) for p in uplinks}
    sent = fab.send_flows(a.ip, b.ip, flows)
    delta = _settled_counters(fab, a.leaf, uplinks, sent, before)
    observed = [delta[p] for p in uplinks]
    total = sum(observed)
    expected = total / len(uplinks) if total else 0.0
    chi2 = sum((o - expected) ** 2 / expected for o in observed) if expected else float("inf")
    crit = chi2_critical(len(uplinks) - 1)
    ok = total == sent and chi2 <= crit
    detail = (f"{sent} flows {a.ip}->{b.ip} over {len(uplinks)} spines: {observed} packets per uplink, "
              f"chi2={chi2:.2f} (limit {crit:.2f} at p=0.001)")
    if total != sent:
        detail += f"; only {total} of {sent} packets left the leaf's uplinks"
    return CheckResult("ecmp_spread", ok, detail, {"per_spine_pkts": observed, "chi2": chi2, "chi2_limit": crit,
                                                   "flows": sent})


def check_reroute(fab: Fabric) -> CheckResult:
    """A leaf-spine link goes down: cross-rail traffic of that leaf reroutes over the other spines with no
    loss once the routes are updated; the link comes back and every path works again."""
    if len(fab.topo.spines) < 2:
        return CheckResult("reroute", True, f"skipped: {len(fab.topo.spines)} spine(s), no alternative path")
    pair = cross_rail_pair(fab)
    assert pair is not None
    leaf = pair[0].leaf
    link = f"{leaf}:{fab.topo.spines[0].name}"
    touched = [(a, b) for a, b in fabric_pairs(fab) if fab.topo.path_switch_hops(a, b) == 3
               and (a.leaf == leaf or b.leaf == leaf)]
    uplink = fab.topo.uplink_port(0)
    fab.faults.link_down(link)
    try:
        before = fab.port_counters(leaf).get(uplink, {}).get("tx_pkts", 0)
        down = fab.probe([(a.ip, b.ip) for a, b in touched], retries=0, timeout_ms=NO_RETRY_TIMEOUT_MS)
        after = fab.port_counters(leaf).get(uplink, {}).get("tx_pkts", 0)
    finally:
        fab.faults.link_up(link)
    up = fab.probe([(a.ip, b.ip) for a, b in touched], retries=2)
    lost = [f"{r['src']}->{r['dst']}" for r in down if not r["ok"]]
    failed_after = [f"{r['src']}->{r['dst']}" for r in up if not r["ok"]]
    used_down_link = after - before
    ok = not lost and not failed_after and used_down_link == 0
    detail = (f"{link} down: {len(touched) - len(lost)}/{len(touched)} cross-rail probes through {leaf} answered "
              f"first time, {used_down_link} packets sent to the down uplink; link up: "
              f"{len(touched) - len(failed_after)}/{len(touched)} answered")
    return CheckResult("reroute", ok, detail, {"link": link, "lost": lost, "failed_after_up": failed_after,
                                               "pkts_to_down_uplink": used_down_link})


@dataclass
class CongestionRun:
    """Packets received through one deliberately congested leaf port, with what INT said about each."""

    link: str
    rate_bps: int
    service_us: float
    rows: list[list[int]]          # [ecn, hops, hop latency us, queue occupancy, egress ts us] per packet
    idle_results: list[dict[str, Any]]

    def deq_depths(self) -> list[int]:
        """Queue depth each packet left behind at the congested port: its INT hop's queue occupancy, the same
        ``deq_qdepth`` that fabric.p4's RED/ECN judged it on (one rail-local hop, so the newest hop is that port)."""
        return [row[3] for row in self.rows]


def congest(fab: Fabric, *, rate_bps: int = CONGEST_RATE_BPS, overload: float = 1.25,
            payload_bytes: int = CONGEST_PAYLOAD_BYTES, packets: int | None = None) -> CongestionRun:
    """Shape one leaf port (toward a server) to ``rate_bps`` and send ECN-capable UDP into it at ``overload``
    times its rate, so its queue grows steadily to the tail-drop limit; meanwhile probe an idle rail."""
    by_leaf: dict[str, list[FabricNic]] = {}
    for nic in fab.topo.nics:
        by_leaf.setdefault(nic.leaf, []).append(nic)
    leaf_nics = by_leaf[fab.topo.leaves[0].name]
    if len(leaf_nics) < 2:
        raise ValueError("congestion needs two servers on one leaf")
    src, dst = leaf_nics[0], leaf_nics[1]
    link = f"{dst.server}:{dst.leaf}"
    frame_bytes = ETH_IP_UDP_BYTES + payload_bytes
    service_us = frame_bytes * 8 * 1e6 / rate_bps
    pps = overload * 1e6 / service_us
    kmax = fab.ecn.kmax if fab.ecn.unit == "pkts" else QUEUE_DEPTH_PKTS
    packets = packets or int(min(QUEUE_DEPTH_PKTS + 10, kmax + 15) / (1 - 1 / overload))
    idle_pairs = [(a.ip, b.ip) for leaf, nics in by_leaf.items() if leaf != src.leaf
                  for a in nics for b in nics if a.server != b.server]
    fab.faults.slow_link(link, str(rate_bps))
    try:
        rows, idle = fab.send_through(src.ip, dst.ip, packets=packets, pps=pps, payload_bytes=payload_bytes,
                                      idle_pairs=idle_pairs)
    finally:
        fab.faults.restore_link(link)
    return CongestionRun(link, rate_bps, service_us, rows, idle)


def red_probability(q: int, kmin: int, kmax: int, pmax: float) -> float:
    """The marking probability fabric.p4 applies at queue depth q (RED as in RoCE deployments)."""
    if q >= kmax:
        return 1.0
    if q <= kmin:
        return 0.0
    return pmax * (q - kmin) / (kmax - kmin)


def check_ecn_curve(fab: Fabric, run: CongestionRun) -> CheckResult:
    """Marked fraction vs queue depth follows the configured RED curve: none at or below Kmin, all at or above
    Kmax, in between the expected count of marks within 4 binomial standard deviations.

    The depth is each packet's INT queue occupancy: the dequeue depth RED judged it on, exact even on a starved
    machine (so no packet is left out; ``left_out`` stays in the data as 0).
    """
    ecn = fab.ecn
    if ecn.unit != "pkts":
        return CheckResult("ecn_curve", True, "skipped: thresholds in bytes")
    depths = run.deq_depths()
    marks = [row[0] == 3 for row in run.rows]
    below = [m for q, m in zip(depths, marks, strict=True) if q < ecn.kmin]
    above = [m for q, m in zip(depths, marks, strict=True) if q > ecn.kmax]
    mid = [(q, m) for q, m in zip(depths, marks, strict=True) if ecn.kmin < q < ecn.kmax]
    expected = sum(red_probability(q, ecn.kmin, ecn.kmax, ecn.pmax_q16 / 65536) for q, _ in mid)
    variance = sum(p * (1 - p) for p in (red_probability(q, ecn.kmin, ecn.kmax, ecn.pmax_q16 / 65536)
                                         for q, _ in mid))
    observed = sum(m for _, m in mid)
    bins: dict[int, list[int]] = {}
    for q, m in zip(depths, marks, strict=True):
        b = bins.setdefault(q // ECN_BIN_PKTS * ECN_BIN_PKTS, [0, 0])
        b[0] += m
        b[1] += 1
    ok = (bool(below) and not any(below) and bool(above) and all(above) and len(mid) >= 10
          and abs(observed - expected) <= 4 * math.sqrt(variance) + 1)
    detail = (f"{len(run.rows)} packets through {run.link} at {run.rate_bps / 1e6:g} Mb/s: below Kmin={ecn.kmin} "
              f"{sum(below)}/{len(below)} marked, above Kmax={ecn.kmax} {sum(above)}/{len(above)} marked, between "
              f"{observed}/{len(mid)} marked (RED expects {expected:.1f} +- {math.sqrt(variance):.1f})")
    curve = {str(k): {"marked": v[0], "packets": v[1]} for k, v in sorted(bins.items())}
    data = {"curve": curve, "observed_mid": observed, "left_out": 0, "expected_mid": expected,
            "below": len(below), "above": len(above), "mid": len(mid)}
    if not ok:
        detail, data = _with_fidelity(fab, detail, data)
    return CheckResult("ecn_curve", ok, detail, data)


def _with_fidelity(fab: Fabric, detail: str, data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A failed timing-sensitive check says whether the emulation kept up (a starved CPU bends queues)."""
    fid = fab.fidelity()
    return f"{detail}; {fidelity_verdict(fid)}", data | {"fidelity": fid}


def check_int_queue(fab: Fabric, run: CongestionRun) -> CheckResult:
    """INT's per-hop queue occupancy grows at the congested port and stays 0 on an idle path."""
    occupancy = [row[3] for row in run.rows]
    peak = max(occupancy, default=0)
    idle = [q for r in run.idle_results if r["ok"] for q in r["rev_queue_occupancy"]]
    idle_ok = all(r["ok"] for r in run.idle_results)
    ok = peak >= min(fab.ecn.kmax, QUEUE_DEPTH_PKTS // 2) and idle_ok and max(idle, default=0) <= 1
    detail = (f"congested hop: queue occupancy rose from {occupancy[0] if occupancy else '-'} to {peak} packets; "
              f"idle path: {len(run.idle_results)} probes, max occupancy {max(idle, default=0)}")
    data: dict[str, Any] = {"peak_pkts": peak, "idle_max_pkts": max(idle, default=0),
                            "idle_probes": len(run.idle_results)}
    if not ok:
        detail, data = _with_fidelity(fab, detail, data)
    return CheckResult("int_queue", ok, detail, data)


def check_mtu(fab: Fabric) -> CheckResult:
    """Full-MTU packets with Don't Fragment cross the longest path: ICMP echo (no INT), and UDP to the RoCE port,
    which grows by an INT stack at every hop yet still arrives (links keep headroom above the MTU)."""
    pair = cross_rail_pair(fab) or (fabric_pairs(fab) or [None])[0]
    if pair is None:
        return CheckResult("mtu", True, "skipped: a single server")
    a, b = pair
    hops = fab.topo.path_switch_hops(a, b)
    out = fab.net.hosts[a.server].cmd(
        f"ping -n -q -c 2 -i 0.2 -W 3 -M do -s {fab.spec.mtu - IP_ICMP_HEADER_BYTES} -I {a.ip} {b.ip}; echo rc=$?")
    ping_ok = out.strip().endswith("rc=0") and " 0% packet loss" in out
    rows, _ = fab.send_through(a.ip, b.ip, packets=MTU_UDP_PACKETS, pps=MTU_UDP_PPS,
                               payload_bytes=fab.spec.mtu - IP_UDP_HEADER_BYTES)
    udp_ok = len(rows) == MTU_UDP_PACKETS and all(r[1] == hops for r in rows)
    detail = (f"{fab.spec.mtu}-byte IP packets with DF {a.ip}->{b.ip} ({hops} switches): ICMP "
              f"{'ok' if ping_ok else 'FAILED'}, UDP/{PROBE_PORT_INT} with INT {len(rows)}/{MTU_UDP_PACKETS} arrived")
    return CheckResult("mtu", ping_ok and udp_ok, detail, {"mtu": fab.spec.mtu, "udp_received": len(rows)})


def check_int_report(fab: Fabric) -> CheckResult:
    """Report mode: receivers get packets with the INT stack stripped, and the collector gets one report per
    packet with one hop per switch crossed (1 rail-local, 3 through a spine)."""
    pairs = fabric_pairs(fab)
    by_ip = {n.ip: n for n in fab.topo.nics}
    with fab.int_collector() as col:
        results = fab.probe([(a.ip, b.ip) for a, b in pairs])
    unstripped = [f"{r['src']}->{r['dst']}" for r in results if r["ok"] and (r["fwd_hops"] or r["rev_hops"])]
    reports = [r for r in col.reports if r["probe"]]
    wrong = [f"{r['src']}->{r['dst']} {r['hops']} hops" for r in reports
             if r["hops"] != fab.topo.path_switch_hops(by_ip[r["src"]], by_ip[r["dst"]])]
    reported = {(r["src"], r["dst"]) for r in reports}
    missing = [f"{a.ip}->{b.ip}" for a, b in pairs if (a.ip, b.ip) not in reported or (b.ip, a.ip) not in reported]
    ok = all(r["ok"] for r in results) and not unstripped and not wrong and not missing
    detail = (f"{len(reports)} reports at the collector for {len(pairs)} probed pairs (requests and replies); "
              f"stack left at a receiver: {len(unstripped)}, wrong hop counts: {len(wrong)}, pairs unreported: "
              f"{len(missing)}")
    return CheckResult("int_report", ok, detail, {"reports": len(reports), "unstripped": unstripped[:10],
                                                  "wrong": wrong[:10], "missing": missing[:10]})


def check_switches_alive(fab: Fabric) -> CheckResult:
    """Every switch process still runs (one killed or crashed is named)."""
    dead = {name: sw.proc.returncode if sw.proc is not None else None
            for name, sw in fab.net.switches.items() if not sw.alive()}
    if not dead:
        return CheckResult("switches", True, f"all {len(fab.net.switches)} switch processes run")
    names = ", ".join(f"{n} ({'stopped' if rc is None else f'exit {rc}'})" for n, rc in sorted(dead.items()))
    return CheckResult("switches", False, f"dead switch(es): {names}", {"dead": sorted(dead)})


def run_checks(fab: Fabric) -> list[CheckResult]:
    """Every check of ``starpulse fabric test``, in order."""
    pairs = fabric_pairs(fab)
    reach, results = check_reachability(fab)
    checks = [reach, check_mtu(fab)]
    if fab.int_cfg.enabled and fab.int_cfg.sink_mode == "host":
        checks.append(check_int_hops(fab, pairs, results))
    if fab.int_cfg.enabled and fab.int_cfg.sink_mode == "report":
        checks.append(check_int_report(fab))
    if fab.backend == "embedded":
        checks.append(check_ecmp(fab))
        checks.append(check_reroute(fab))
        if fab.int_cfg.enabled and fab.int_cfg.sink_mode == "host":
            run = congest(fab)
            checks += [check_ecn_curve(fab, run), check_int_queue(fab, run)]
    checks.append(check_switches_alive(fab))   # last: a switch that died during the checks is named too
    return checks
