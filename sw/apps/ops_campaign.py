"""``starpulse ops campaign``: the closed loop of the operations system.  On its own fabric (ops on) a training
job (tiny MoE: all-to-all and bucketed allreduce every step) runs; after calibration and a healthy stretch (false
alarms), one random fault at a time (random kind, place, severity, moment) is injected through the fault injector,
the store is diagnosed after every step until the top suspect is right or the window ends, the fault is cleared
and the job recovers.  JSON (a contract): ``faults``, ``detected``, ``top1_accuracy``, ``top3_accuracy``,
``false_alarms``, ``healthy_steps``, ``median_steps_to_detect``, ``median_time_to_localize_s`` (network time),
``median_wall_time_to_localize_s``, ``by_kind``, ``faults_detail``; also ``fidelity``, ``time_dilation``,
``topology`` and ``completed``: a job that dies after the first fault still reports what was measured, with
``completed`` false and the ``error``, and the command exits 1.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sw.apps.ops_cli import window_diagnosis
from sw.clock import Clock
from sw.ops.expected import CalibrationError
from sw.units import int_flag
from sw.units.plot import plot_figure
from sw.units.telemetry import ENV_TELEMETRY_DB, TelemetryStore

KINDS = ("slow_gpu", "degraded_link", "down_link", "dead_switch", "lossy_link", "slow_nic", "flapping_link",
         "congested_port", "pfc_storm")
"""Fault kinds the campaign injects (the links a lossy-link fault will hit are built impairable up front; with
``pfc_storm`` among them the fabric runs PFC on its lossless RoCE class, as such fabrics are deployed)."""
CAMPAIGN_MODEL = {"layers": 2, "hidden": 128, "tokens_per_step": 2048, "gpu_tflops": 12.0, "scale": 0.3,
                  "nic_gbps": 100.0, "experts": 4, "top_k": 2, "bucket_mb": 1.0}
"""A tiny MoE: every step has compute, all-to-all on the critical path and an overlapped allreduce."""
CALIBRATION = (1, 3)
RECOVERY_STEPS = 2
FLAP_HALF_PERIOD_WALL_S = (1.5, 3.0)
"""A flapping link stays down, then up, this long (wall s, drawn per fault): several switch polls (0.5 s) each."""
STALL_FACTOR = 4.0
"""A window with no completed step for this many healthy step times (wall) is judged on time alone."""


class CampaignError(ValueError):
    is_user_error = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    from sw.apps.rank_job import add_job_topology_arguments
    from sw.units import add_time_dilation_flag

    p.add_argument("--faults", type=int_flag(1, 10_000), required=True, metavar="N", help="faults to inject")
    p.add_argument("--json", action="store_true", help="print the JSON result on stdout (progress: stderr)")
    p.add_argument("--plot", default=None, metavar="FILE", help="per-kind accuracy and time-to-localize (PNG)")
    p.add_argument("--kinds", default=",".join(KINDS), metavar="K[,K...]",
                   help=f"fault kinds (default {', '.join(KINDS)}; PFC is on in the fabric when pfc_storm is "
                        "among them)")
    p.add_argument("--healthy-steps", type=int_flag(1, 100_000), default=6, metavar="N",
                   help="healthy steps judged for false alarms before the first fault (default 6)")
    p.add_argument("--window-steps", type=int_flag(1, 100), default=3, metavar="N",
                   help="steps a fault is observed for before it counts as missed (default 3)")
    p.add_argument("--keep-store", default=None, metavar="FILE", help="copy the run's telemetry store here")
    p.add_argument("--timeout", type=float, default=3600.0, metavar="S", help="stop after S wall seconds")
    add_job_topology_arguments(p)          # its --seed also seeds the campaign's kinds, places and moments
    add_time_dilation_flag(p)
    p.set_defaults(servers=8, gpus_per_server=2)
    p.description = ("Fault campaign on its own fabric (default 8 servers x 2 rails, 2 spines: the topology group's "
                     "'default 4' is the other commands'); its --seed also seeds the faults.")


@dataclass
class Fault:
    """One injection: what, where, how bad; the truth the diagnosis is scored against."""

    kind: str
    place: str
    action: str
    target: str
    value: str | None
    severity: float
    clear: tuple[str, str, str | None]
    detail: dict[str, Any] = field(default_factory=dict)


def pick_fault(rng: random.Random, kind: str, topo: Any, links: list[Any], clock: Clock | None = None) -> Fault:
    """A random fault of ``kind`` on ``topo``: place and severity as the issue gives them (``clock``: the fabric's,
    for a flap's period in network time)."""
    if kind == "slow_gpu":
        rank = rng.randrange(topo.spec.servers * topo.spec.gpus_per_server)
        factor = round(rng.uniform(1.3, 3.0), 2)
        return Fault(kind, f"rank {rank}", "slow_gpu", str(rank), str(factor), factor, ("restore_gpu", str(rank), None))
    if kind == "degraded_link":   # a NIC's link: the rail-aligned job never crosses the spines, so a slow
        lk = rng.choice([x for x in links if x.kind == "host-leaf"])   # spine link would not touch it
        share = rng.uniform(0.2, 0.6)
        rate = int(lk.rate_bps * share)
        return Fault(kind, f"{lk.a}<->{lk.b}", "slow_link", f"{lk.a}:{lk.b}", str(rate), round(share, 3),
                     ("restore_link", f"{lk.a}:{lk.b}", None))
    if kind == "down_link":
        lk = rng.choice([x for x in links if x.kind == "leaf-spine"])
        return Fault(kind, f"{lk.a}<->{lk.b}", "link_down", f"{lk.a}:{lk.b}", None, 1.0,
                     ("link_up", f"{lk.a}:{lk.b}", None))
    if kind == "dead_switch":
        sw = rng.choice([s.name for s in topo.spines])
        return Fault(kind, sw, "switch_stop", sw, None, 1.0, ("switch_start", sw, None))
    if kind == "lossy_link":      # a NIC's link (the job's traffic crosses it); built impairable (lossy_links)
        lk = rng.choice([x for x in links if x.kind == "host-leaf"])
        pct = round(rng.uniform(0.5, 5.0), 2)
        return Fault(kind, f"{lk.a}<->{lk.b}", "loss", f"{lk.a}:{lk.b}", str(pct), pct,
                     ("loss", f"{lk.a}:{lk.b}", "0"))
    if kind == "slow_nic":
        lk = rng.choice([x for x in links if x.kind == "host-leaf"])
        share = rng.uniform(0.2, 0.6)
        return Fault(kind, lk.a_ifname, "slow_nic", lk.a_ifname, str(int(lk.rate_bps * share)), round(share, 3),
                     ("restore_nic", lk.a_ifname, None))
    if kind == "congested_port":   # foreign traffic into a NIC's leaf port at 80-100 % of the link's rate
        lk = rng.choice([x for x in links if x.kind == "host-leaf"])
        share = rng.uniform(0.8, 1.0)
        return Fault(kind, f"{lk.b} port {lk.b_port}", "congest", lk.a_ifname, str(int(lk.rate_bps * share)),
                     round(share, 3), ("uncongest", lk.a_ifname, None))
    if kind == "pfc_storm":        # a NIC stuck sending PFC pauses into its leaf (the fabric runs PFC)
        lk = rng.choice([x for x in links if x.kind == "host-leaf"])
        rail = lk.a_ifname.rsplit("-eth", 1)[1]
        return Fault(kind, f"{lk.a}<->{lk.b}", "pfc_storm", f"{lk.a}:{rail}", None, 1.0,
                     ("restore_pfc", f"{lk.a}:{rail}", None))
    if kind == "flapping_link":   # a leaf-spine link: rerouted at every change, the rail-aligned job keeps going
        lk = rng.choice([x for x in links if x.kind == "leaf-spine"])
        half_wall_s = rng.uniform(*FLAP_HALF_PERIOD_WALL_S)
        period_ns = int(2 * (clock.net_duration_ns(half_wall_s * 1e9) if clock else half_wall_s * 1e9))
        return Fault(kind, f"{lk.a}<->{lk.b}", "flap", f"{lk.a}:{lk.b}", str(period_ns), 1.0,
                     ("link_up", f"{lk.a}:{lk.b}", None), {"period_ns": period_ns})
    raise CampaignError(f"--kinds {kind}: unknown fault kind (allowed: {', '.join(KINDS)})")


def plan_faults(rng: random.Random, plan: list[str], topo: Any) -> list[Fault | None]:
    """The lossy-link faults of ``plan`` picked up front (their links must be built impairable), None for the
    others (picked when injected)."""
    return [pick_fault(rng, k, topo, list(topo.links)) if k == "lossy_link" else None for k in plan]


def parse_kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise CampaignError(f"--kinds {text}: unknown kind {bad[0] if bad else '(none)'} (allowed: "
                            f"{', '.join(KINDS)})")
    return kinds


class Job:
    """The training job on the fabric, run in a thread; ``stop()`` ends it early, ``wait()`` until it ends.  Its
    ranks record into the fabric's store when ops is on there."""

    def __init__(self, target: Any, model_path: Path, steps: int, work_dir: Path, timeout_s: float) -> None:
        import os

        from emu.launch import launch
        from sw.apps.train import ENV_LINE_RATE, _rank_argv
        from sw.clock.lag import ENV_LAG_DIR
        from sw.units.straggler import ENV_SLOW_DIR

        status = target.fabric.status()
        env = {**os.environ, ENV_LINE_RATE: repr(float(target.topo.spec.link_rate_bps)),
               ENV_SLOW_DIR: status["straggler_dir"], ENV_LAG_DIR: status["lag_dir"]}
        if status.get("telemetry_db"):
            env[ENV_TELEMETRY_DB] = status["telemetry_db"]
        argv = _rank_argv(argparse.Namespace(model=str(model_path), steps=steps, warmup=1),
                          str(work_dir / "rank0.json"))
        self.stop_event = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

        def body() -> None:
            try:
                self.result = launch(target.topo, target.ns_pids, argv, logdir=work_dir / "ranks", env=env,
                                     timeout_s=timeout_s, echo=None, clock=target.clock, stop=self.stop_event)
            except BaseException as exc:   # reported by the campaign's loop
                self.error = exc

        self.thread = threading.Thread(target=body, name="campaign-job", daemon=True)
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=120)

    def wait(self) -> Any:
        """The launcher's result once every rank ended (``launch``'s timeout bounds it); its error re-raised."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.result


def completed_step(store: TelemetryStore, world: int) -> int:
    """The last step every rank has recorded (-1 before the first)."""
    row = store.db.execute("SELECT rank, max(step) FROM steps GROUP BY rank").fetchall()
    return min((r[1] for r in row), default=-1) if len(row) == world else -1


def step_bounds(store: TelemetryStore, step: int) -> tuple[int, int]:
    lo, hi = store.db.execute("SELECT min(t0_ns), max(t1_ns) FROM steps WHERE step = ?", (step,)).fetchone()
    return int(lo), int(hi)


def _same_place(a: str, b: str) -> bool:
    """Places match as sets of their node names (``x<->y`` == ``y<->x``)."""
    return set(a.split("<->")) == set(b.split("<->"))


def run(args: argparse.Namespace) -> int:
    from emu.run_cli import fabric_target

    kinds = parse_kinds(args.kinds)
    if args.keep_store and not Path(args.keep_store).resolve().parent.is_dir():
        raise CampaignError(f"--keep-store {args.keep_store}: its folder does not exist")
    rng = random.Random(args.seed)
    plan = [rng.choice(kinds) for _ in range(args.faults)]
    for i, k in enumerate(kinds[: args.faults]):      # every kind at least once when there are enough faults
        plan[i] = k
    rng.shuffle(plan)
    args.name = f"campaign-{id(args) % 100000}"        # never a running fabric: the campaign injects into its own
    args.gpus = None
    args.ops = "on"
    args.pfc = "on" if "pfc_storm" in kinds else "off"   # a storm needs switches that honour pauses
    if args.pfc == "on" and args.backend != "embedded":
        raise CampaignError(f"--kinds pfc_storm: needs --backend embedded (backend {args.backend} has no PFC); "
                            "name the other kinds with --kinds")
    args.local = False
    from emu.run_cli import spec_for
    from sw.collectives.fabric_topology import Topology

    early = plan_faults(rng, plan, Topology(spec_for(args)))
    args.impairable = sorted({f.target for f in early if f is not None}) or None
    steps_total = 2 * (CALIBRATION[1] + 1 + args.healthy_steps + args.faults * (args.window_steps + RECOVERY_STEPS + 1))
    # (twice what the loop needs at most: stalls and random moments use steps too; the job is stopped at the end)
    with fabric_target(args) as target:
        fab = target.fabric
        clock: Clock = target.clock
        store = TelemetryStore(fab.collector.store.path)
        from emu.reap import owned_tempdir

        work = owned_tempdir("starpulse-campaign-")
        model = work / "model.json"
        world = target.topo.spec.servers * target.topo.spec.gpus_per_server
        model.write_text(json.dumps({**CAMPAIGN_MODEL, "experts": world}))   # one expert per rank
        _progress(f"campaign: {args.faults} fault(s) of {', '.join(kinds)} on {target.topo.spec.servers} servers x "
                  f"{target.topo.spec.gpus_per_server} rails, {target.topo.spec.spines} spines, dilation "
                  f"{clock.dilation:g}, PFC {args.pfc}; job of {steps_total} steps")
        job = Job(target, model, steps_total, work, args.timeout)
        partial: dict[str, Any] = {}
        failure: CampaignError | None = None
        try:
            result = _loop(args, rng, plan, early, target, store, job, clock, world, partial)
        except CampaignError as exc:
            if not partial.get("details"):
                raise                      # nothing measured yet: the one-line error is the whole answer
            failure = exc                  # what was measured is reported, marked incomplete (never as a full run)
            result = _result(partial)
        finally:
            job.stop()
            if args.keep_store:       # also when the campaign failed: the store is what explains it
                Path(args.keep_store).unlink(missing_ok=True)
                store.db.execute("VACUUM INTO ?", (str(Path(args.keep_store).resolve()),))
        import shutil

        if failure is None:
            shutil.rmtree(work, ignore_errors=True)    # kept (rank logs) only when the campaign failed
        result["completed"] = failure is None
        if failure is not None:
            result["error"] = str(failure)
        result["fidelity"] = fab.fidelity()
        result["time_dilation"] = clock.dilation
        result["topology"] = {"servers": target.topo.spec.servers, "gpus_per_server": target.topo.spec.gpus_per_server,
                              "spines": target.topo.spec.spines, "link_rate_bps": target.topo.spec.link_rate_bps,
                              "pfc": args.pfc}
        result["wall_s"] = round(clock.wall_duration_ns(clock.now_ns()) / 1e9, 1)   # since the fabric's clock began
        result["store_rows"] = store.counts()
        result["polls"] = fab.collector.polls
        store.close()
    if args.plot:
        _plot(result, args.plot)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for line in summary_lines(result):
            print(line)
    if failure is not None:
        _progress(f"starpulse ops: failed after {result['faults']} of {args.faults} fault(s): {failure}")
        return 1
    return 0


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _wait_step(store: TelemetryStore, world: int, want: int, job: Job, clock: Clock, wall_budget_s: float) -> bool:
    """Wait until every rank recorded step ``want``; False when the budget (wall s) ran out first."""
    deadline = clock.now_ns() + clock.net_duration_ns(wall_budget_s * 1e9)
    while completed_step(store, world) < want:
        if not job.alive():
            failed = [r for r in (job.result.ranks if job.result else []) if r.returncode and not r.stopped_by_launcher]
            where = f"rank {failed[0].rank} exit {failed[0].returncode}, log {failed[0].log_path}" if failed else \
                str(job.error)
            raise CampaignError(f"the training job ended early ({where})")
        if clock.now_ns() > deadline:
            return False
        clock.sleep_ns(clock.net_duration_ns(0.2e9))
    return True


def _loop(args: argparse.Namespace, rng: random.Random, plan: list[str], early: list[Fault | None], target: Any,
          store: TelemetryStore, job: Job, clock: Clock, world: int, partial: dict[str, Any]) -> dict[str, Any]:
    """Calibrate, judge the healthy steps, inject the plan; ``partial`` holds what is measured so far (the caller
    reports it when the job dies part-way)."""
    fab = target.fabric
    lo, hi = CALIBRATION
    _wait_step(store, world, hi, job, clock, args.timeout)
    from sw.apps.ops_sim import store_expected

    try:
        exp = store_expected(store, CALIBRATION)
    except CalibrationError as exc:
        raise CampaignError(str(exc)) from None
    links_meta = store.meta().get("links", [])
    t0, t1 = step_bounds(store, hi)
    step_wall_s = max(clock.wall_duration_ns(exp.step_ns) / 1e9, 0.05)
    predicted = exp.sim.step_ns if exp.sim is not None else None
    _progress(f"calibrated on steps {lo}..{hi}: step {exp.step_ns / 1e6:.1f} ms network ({step_wall_s:.2f} s wall); "
              f"expected model {exp.model}" + (f", its step {predicted / 1e6:.1f} ms" if predicted else ""))
    false_alarms, healthy = 0, 0
    step = hi
    alarms: list[dict[str, Any]] = []
    details: list[dict[str, Any]] = []
    partial.update({"details": details, "alarms": alarms, "expected": exp})
    for _ in range(args.healthy_steps):
        step += 1
        if not _wait_step(store, world, step, job, clock, STALL_FACTOR * 4 * step_wall_s + 30):
            break
        a, b = step_bounds(store, step)
        res = window_diagnosis(store, exp, links_meta, a, b)
        healthy += 1
        if res["detected"]:
            false_alarms += 1
            alarms.append({"step": step, "suspects": res["suspects"]})
        partial.update({"false_alarms": false_alarms, "healthy": healthy})
        top = res["suspects"][0] if res["detected"] else None
        _progress(f"healthy step {step}: " + (f"ALARM {top['kind']} {top['place']}" if top else "no suspects"))
    links = list(target.topo.links)
    for i, kind in enumerate(plan):
        f = early[i] or pick_fault(rng, kind, target.topo, links, clock)
        try:
            clock.sleep_ns(clock.net_duration_ns(rng.uniform(0, step_wall_s) * 1e9))   # a random moment in a step
            inj_ns = clock.box_ns()
            fab.faults.apply(f.action, f.target, f.value)
            store.add_fault(inj_ns, f.action, f.target, f.value)
            base_step = completed_step(store, world)
            d: dict[str, Any] = {"kind": f.kind, "place": f.place, "severity": f.severity, "action": f.action,
                                 "target": f.target, "value": f.value, "diagnosis": None, "detected": False,
                                 "top1": False, "top3": False, "correct": False, "steps_to_detect": None,
                                 "time_to_localize_s": None, "wall_time_to_localize_s": None}
            for k in range(1, args.window_steps + 1):
                _wait_step(store, world, base_step + k, job, clock, STALL_FACTOR * step_wall_s + 5)
                res = window_diagnosis(store, exp, links_meta, inj_ns)
                places = [s["place"] for s in res["suspects"]]
                d["diagnosis"] = res["suspects"]
                if res["detected"] and not d["detected"]:
                    d["detected"], d["steps_to_detect"] = True, k
                d["top3"] = d["top3"] or any(_same_place(p, f.place) for p in places)
                if places and _same_place(places[0], f.place) and res["suspects"][0]["kind"] == f.kind:
                    d["top1"] = d["correct"] = True
                    d["time_to_localize_s"] = (clock.box_ns() - inj_ns) / 1e9
                    d["wall_time_to_localize_s"] = clock.wall_duration_ns(clock.box_ns() - inj_ns) / 1e9
                    d["steps_to_localize"] = k
                    break
            fab.faults.apply(*f.clear)
            details.append(d)
            top = d["diagnosis"][0] if d["diagnosis"] else None
            _progress(f"fault {i + 1}/{len(plan)}: {f.kind} {f.place} (severity {f.severity}) -> "
                      f"{(top['kind'] + ' ' + top['place']) if top else 'nothing'}: "
                      f"{'correct' if d['correct'] else 'top-3' if d['top3'] else 'MISSED'}"
                      + (f" in {d['time_to_localize_s']:.3f} s network, {d['wall_time_to_localize_s']:.1f} s wall"
                         if d["correct"] else ""))
            done = completed_step(store, world)
            _wait_step(store, world, done + RECOVERY_STEPS, job, clock, STALL_FACTOR * 10 * step_wall_s + 60)
        except CampaignError as exc:     # the job died: name the fault it died under
            raise CampaignError(f"during fault {i + 1} ({f.kind} {f.place}): {exc}") from None
    return _result(partial)


def _result(partial: dict[str, Any]) -> dict[str, Any]:
    """The campaign's JSON figures from what ``_loop`` measured (all of it, or up to the job's end)."""
    out = scores(partial["details"])
    out.update({"false_alarms": partial.get("false_alarms", 0), "healthy_steps": partial.get("healthy", 0),
                "false_alarm_detail": partial["alarms"], "expected": partial["expected"].to_json()})
    return out


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def scores(details: list[dict[str, Any]]) -> dict[str, Any]:
    """The campaign's figures over ``details`` (each injection), overall and per kind."""
    def figures(ds: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(ds)
        return {"faults": n, "detected": sum(d["detected"] for d in ds),
                "top1_accuracy": sum(d["top1"] for d in ds) / n if n else None,
                "top3_accuracy": sum(d["top3"] for d in ds) / n if n else None,
                "median_steps_to_detect": _median([d["steps_to_detect"] for d in ds if d["steps_to_detect"]]),
                "median_time_to_localize_s": _median([d["time_to_localize_s"] for d in ds if d["correct"]]),
                "median_wall_time_to_localize_s": _median([d["wall_time_to_localize_s"] for d in ds if d["correct"]])}

    out = figures(details)
    out["by_kind"] = {k: figures([d for d in details if d["kind"] == k])
                      for k in sorted({d["kind"] for d in details})}
    out["faults_detail"] = details
    return out


def summary_lines(r: dict[str, Any]) -> list[str]:
    fid = r.get("fidelity") or {}
    lines = [f"# campaign: {r['faults']} faults, detected {r['detected']}, top-1 {r['top1_accuracy']:.2f}, top-3 "
             f"{r['top3_accuracy']:.2f}, false alarms {r['false_alarms']} in {r['healthy_steps']} healthy steps, "
             f"dilation {r.get('time_dilation')}, fidelity {'ok' if fid.get('ok') else 'NOT ok'}",
             "# kind            faults  detected  top1   top3   steps  localize_s  wall_s"]
    if r.get("completed") is False:          # figures of a job that died part-way never pass for a full run
        lines.insert(0, f"# INCOMPLETE: the job ended early ({r.get('error')})")
    for k, f in r["by_kind"].items():
        def fmt(v: Any) -> str:
            return "-" if v is None else f"{v:.3g}"
        lines.append(f"  {k:<16} {f['faults']:6d}  {f['detected']:8d}  {fmt(f['top1_accuracy']):5}  "
                     f"{fmt(f['top3_accuracy']):5}  {fmt(f['median_steps_to_detect']):5}  "
                     f"{fmt(f['median_time_to_localize_s']):10}  {fmt(f['median_wall_time_to_localize_s'])}")
    return lines


def plot_title(r: dict[str, Any]) -> str:
    """The plot's title: the run's figures with its dilation and fidelity verdict, so a figure of a run that did not
    keep up with its clock never looks like one that did."""
    fid = r.get("fidelity") or {}
    verdict = ("fidelity ok" if fid.get("ok") else
               f"fidelity NOT ok ({100 * (fid.get('late_share') or 0):.2f} % of {fid.get('worst_component', '?')}'s "
               "events late): not a result")
    return (f"{r['faults']} faults, top-1 {r['top1_accuracy']}, top-3 {r['top3_accuracy']}, {r['false_alarms']} "
            f"false alarms in {r['healthy_steps']} healthy steps; dilation {r.get('time_dilation', '?')}, {verdict}")


def _plot(r: dict[str, Any], path: str) -> None:
    """Per kind: top-1 accuracy and median time to localize, under ``plot_title``."""
    kinds = list(r["by_kind"])
    try:
        with plot_figure(path, 1, 2, figsize=(10, 3.8), dpi=100) as (fig, (a1, a2)):
            fig.suptitle(plot_title(r), fontsize=9)
            a1.bar([k for k in kinds], [r["by_kind"][k]["top1_accuracy"] or 0 for k in kinds], color="tab:blue")
            a1.set_ylim(0, 1.05)
            a1.set_title("top-1 accuracy per kind")
            a2.bar(kinds, [r["by_kind"][k]["median_time_to_localize_s"] or 0 for k in kinds], color="tab:orange")
            a2.set_title("median time to localize (network s)")
            for ax in (a1, a2):
                ax.tick_params(axis="x", labelrotation=20)
    except OSError as exc:
        raise CampaignError(f"--plot {path}: cannot write ({exc.strerror})") from None
