"""Fault injection on a running fabric: link down/up, slow link, loss, delay, switch stop/start, a slow GPU;
JSON-logged.

Links are named ``A:B`` by their two nodes (``s0:p0l0`` is server s0's NIC into leaf p0l0, ``p0l0:sp1`` a
leaf-spine link).  A leaf-spine link going down also reroutes: ``emu.reroute`` recomputes the ECMP groups of
every leaf and the routes of the spine without it.  A slow link is shaped in the switch's traffic manager at its
switch end(s) and with a kernel ``tbf`` on a host NIC's egress.  Loss % and extra delay need a link emulator on
the link (``emu.linkemu``: the switch's traffic manager has no loss or delay knob and this kernel has no tc
netem), so they work on links the fabric was built with as impairable and raise a ``FaultError`` saying so on
the others.  A slow GPU (``slow_gpu RANK FACTOR``, cleared by ``restore_gpu RANK``) makes a rank of the training
workload compute FACTOR times slower from its next step: the factor goes through
``sw.units.straggler.set_compute_factor`` into the fabric's straggler directory (``straggler_dir``, in ``fabric
status``), which ``starpulse train`` on this fabric hands its ranks.  A script (``run_script``) replays timed actions:
``+0.5s link_down p0l0:sp0`` (times relative to the script's start, in network time through ``sw.clock``).
A slow NIC (``slow_nic s1-eth0 RATE``, cleared by ``restore_nic s1-eth0``) makes the rank on that NIC pace its
port at RATE from its next step (``sw.units.straggler.set_nic_rate_share``, read by ``starpulse train``'s ranks).
A flapping link (``flap A:B PERIOD``) goes down and up every half PERIOD of network time (a thread on the
fabric's clock, each change logged) until ``link_up`` or ``restore_link`` on it stops it and leaves it up.  A
congested port (``congest s1-eth0 RATE``, stopped by ``uncongest s1-eth0``): another tenant's RoCE traffic into
that NIC, as in a shared cluster (``emu.tenant``: an RC QP from the next NIC of the same leaf and rail, RDMA WRITEs
paced at RATE in the fabric's lossless RoCE class, honouring PFC pauses and cutting its rate on CNPs like any DCQCN
sender; its receiver runs beside the rank in the target host, on QP numbers of its own, so neither NIC takes the
other's frames), so the leaf's port toward it is shared with the job's traffic instead of starving the foreign
stream behind the job's class (foreign UDP in class 0, the fault before) or overrunning the lossless class (a
sender deaf to PAUSE).  A PFC storm
(``pfc_storm s1:0``, i.e. HOST[:RAIL], rail 0 when left out; stopped by ``restore_pfc s1:0``): a process in the
host's namespace (``emu.pfc_storm``) makes that NIC send PFC PAUSE frames for the fabric's lossless priority with
the maximum quanta, refreshed every quarter of the pause time (network time), so the leaf's queue toward the NIC
stays paused and the pause spreads upstream; it needs a fabric with PFC on (``--pfc on``).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emu.reroute import DegradedTopology, link_key, route_commands
from sw.collectives.fabric_topology import LinkSpec
from sw.units import UnitError, parse_duration_ns, parse_rate_bps
from sw.units.straggler import MAX_FACTOR, StragglerError, set_compute_factor, set_nic_rate_share

if TYPE_CHECKING:
    from emu.fabric import Fabric

ACTIONS = ("link_down", "link_up", "slow_link", "restore_link", "loss", "delay", "switch_stop", "switch_start",
           "slow_gpu", "restore_gpu", "slow_nic", "restore_nic", "flap", "congest", "uncongest", "pfc_storm",
           "restore_pfc")
TENANT_SUBDIR = "tenants"
"""The fabric workdir's subdirectory of the ``congest`` streams' rendezvous stores and logs (``emu.tenant``)."""
TENANT_READY_WALL_NS = 30_000_000_000
"""Wall time both ends of a ``congest`` stream get to open their NICs and connect."""
PFC_STORM_REFRESHES = 4
"""A storming NIC sends its maximum-quanta pause this many times per pause time (it never runs out)."""
MIN_FLAP_PERIOD_NS = 1_000_000
"""The shortest flap period (network time): each change reprograms switches, which takes wall time."""
STRAGGLER_SUBDIR = "stragglers"
"""The fabric workdir's subdirectory of compute factors (``sw.units.straggler``) its training jobs read."""
TBF_BURST_BYTES = 32768
TBF_LATENCY_US = 50_000


class FaultError(RuntimeError):
    """A fault request that cannot be applied: unknown link/switch/action, a bad value, or a missing capability."""

    is_user_error = True


@dataclass
class FaultEvent:
    """One logged fault action (a JSON line in the fault log): when it started (UTC and network time ``t_ns`` of
    the fabric's clock), how long applying it took, and which nodes it touched."""

    time_utc: str
    t_ns: int
    action: str
    target: str
    value: str | None
    ok: bool
    detail: str = ""
    changed: list[str] = field(default_factory=list)
    duration_ns: int = 0


class FaultInjector:
    """Applies faults to one ``Fabric`` and appends each action to ``log_path`` (JSON lines)."""

    def __init__(self, fabric: Fabric, log_path: str) -> None:
        self.fabric = fabric
        self.log_path = Path(log_path)
        self.down_links: set[frozenset[str]] = set()
        self.slow_links: dict[frozenset[str], int] = {}
        self.stopped_switches: set[str] = set()
        self.impaired: dict[frozenset[str], dict[str, float]] = {}
        self.slow_gpus: dict[int, float] = {}
        self.slow_nics: dict[str, int] = {}
        self.flapping: dict[frozenset[str], threading.Event] = {}
        self.congested: dict[str, tuple[Any, int]] = {}
        self.storming: dict[str, Any] = {}
        """NIC interface -> the ``emu.pfc_storm`` process sending its pauses."""
        self.straggler_dir = Path(fabric.workdir) / STRAGGLER_SUBDIR
        self._lock = threading.Lock()

    # --- naming ----------------------------------------------------------------------------------------------
    def link(self, name: str) -> LinkSpec:
        """The link named ``A:B`` (either order)."""
        parts = name.split(":")
        if len(parts) != 2:
            raise FaultError(f"link {name!r}: expected NODE:NODE, e.g. s0:p0l0 or p0l0:sp0")
        key = link_key(*parts)
        for link in self.fabric.topo.links:
            if link_key(link.a, link.b) == key:
                return link
        raise FaultError(f"link {name!r}: no such link in this fabric (examples: "
                         f"{', '.join(f'{lk.a}:{lk.b}' for lk in self.fabric.topo.links[:3])})")

    def _switch(self, name: str) -> Any:
        sw = self.fabric.net.switches.get(name)
        if sw is None:
            raise FaultError(f"switch {name!r}: no such switch (switches: {', '.join(self.fabric.net.switches)})")
        return sw

    # --- actions ---------------------------------------------------------------------------------------------
    def apply(self, action: str, target: str, value: str | None = None) -> FaultEvent:
        """Apply one fault action by name (as the CLI and scripts do) and log it."""
        handlers = {
            "link_down": lambda: self._link_down(target), "link_up": lambda: self._link_up(target),
            "slow_link": lambda: self._slow_link(target, value),
            "restore_link": lambda: self._restore_link(target),
            "loss": lambda: self._impair(target, "loss", value),
            "delay": lambda: self._impair(target, "delay", value),
            "switch_stop": lambda: self._switch_stop(target), "switch_start": lambda: self._switch_start(target),
            "slow_gpu": lambda: self._slow_gpu(action, target, value),
            "restore_gpu": lambda: self._slow_gpu(action, target, "1"),
            "slow_nic": lambda: self._slow_nic(action, target, value),
            "restore_nic": lambda: self._slow_nic(action, target, None),
            "flap": lambda: self._flap(target, value),
            "congest": lambda: self._congest(target, value),
            "uncongest": lambda: self._uncongest(target),
            "pfc_storm": lambda: self._pfc_storm(target), "restore_pfc": lambda: self._restore_pfc(target),
        }
        if action not in handlers:
            raise FaultError(f"fault action {action!r}: allowed {', '.join(ACTIONS)}")
        clock = self.fabric.clock
        with self._lock:
            started_utc, start_ns = _utc(), clock.now_ns()
            try:
                changed = handlers[action]()
            except FaultError as exc:
                self._log(FaultEvent(started_utc, start_ns, action, target, value, False, str(exc),
                                     duration_ns=clock.now_ns() - start_ns))
                raise
            event = FaultEvent(started_utc, start_ns, action, target, value, True, changed=changed,
                               duration_ns=clock.now_ns() - start_ns)
            self._log(event)
            return event

    def link_down(self, name: str) -> FaultEvent:
        return self.apply("link_down", name)

    def link_up(self, name: str) -> FaultEvent:
        return self.apply("link_up", name)

    def slow_link(self, name: str, rate: str | int) -> FaultEvent:
        return self.apply("slow_link", name, str(rate))

    def restore_link(self, name: str) -> FaultEvent:
        return self.apply("restore_link", name)

    def loss(self, name: str, loss_pct: float) -> FaultEvent:
        return self.apply("loss", name, str(loss_pct))

    def delay(self, name: str, extra: str | int) -> FaultEvent:
        """Extra one-way delay on an impairable link (``'5ms'``, or ns as an int); 0 clears it."""
        return self.apply("delay", name, str(extra))

    def switch_stop(self, name: str) -> FaultEvent:
        return self.apply("switch_stop", name)

    def switch_start(self, name: str) -> FaultEvent:
        return self.apply("switch_start", name)

    def slow_gpu(self, rank: int | str, factor: float | str) -> FaultEvent:
        """Rank ``rank`` computes ``factor`` times slower from its next training step (1 clears it)."""
        return self.apply("slow_gpu", str(rank), str(factor))

    def restore_gpu(self, rank: int | str) -> FaultEvent:
        return self.apply("restore_gpu", str(rank))

    def slow_nic(self, nic: str, rate: str | int) -> FaultEvent:
        """The rank on NIC ``nic`` (``s1-eth0``) paces its port at ``rate`` from its next training step."""
        return self.apply("slow_nic", nic, str(rate))

    def restore_nic(self, nic: str) -> FaultEvent:
        return self.apply("restore_nic", nic)

    def flap(self, name: str, period: str | int) -> FaultEvent:
        """Link ``name`` down and up every half ``period`` (``'2s'``, or ns as an int) until ``link_up`` on it."""
        return self.apply("flap", name, str(period))

    def _ends(self, link: LinkSpec) -> list[tuple[Any, str]]:
        net = self.fabric.net
        return [(net.node(link.a), link.a_ifname), (net.node(link.b), link.b_ifname)]

    def _set_link_state(self, link: LinkSpec, state: str) -> None:
        for node, ifname in self._ends(link):
            out = node.cmd(f"ip link set dev {ifname} {state} 2>&1; echo rc=$?")
            if not out.strip().endswith("rc=0"):
                raise FaultError(f"link {link.a}:{link.b}: `ip link set {ifname} {state}` failed: {out.strip()}")

    def _link_down(self, name: str) -> list[str]:
        link = self.link(name)
        self._set_link_state(link, "down")
        self.down_links.add(link_key(link.a, link.b))
        return self._reroute(link)

    def _link_up(self, name: str) -> list[str]:
        link = self.link(name)
        self._stop_flap(link)
        self._set_link_state(link, "up")
        if link.kind == "host-leaf":   # the host's addresses and routes on a NIC go away with its carrier
            self._reconfigure_host(link.a)
        self.down_links.discard(link_key(link.a, link.b))
        return self._reroute(link)

    def _reconfigure_host(self, server: str) -> None:
        from emu.net import host_batch

        batch = self.fabric.workdir / f"{server}.ip-batch"
        batch.write_text("\n".join(host_batch(self.fabric.topo, server)).replace("rule add", "rule replace") + "\n")
        self.fabric.net.hosts[server].cmd(f"ip -force -batch {batch} >/dev/null 2>&1")

    def _reroute(self, link: LinkSpec) -> list[str]:
        """Reprogram the routing tables of every switch whose routes depend on leaf-spine link states."""
        if link.kind != "leaf-spine":
            return []
        degraded = DegradedTopology(self.fabric.spec, self.down_links)
        changed = []
        for sw in self.fabric.topo.switches:
            if sw.name in self.stopped_switches:
                continue
            self.fabric.program_switch(sw.name, route_commands(degraded, sw.name))
            changed.append(sw.name)
        return changed

    def _slow_link(self, name: str, value: str | None) -> list[str]:
        link = self.link(name)
        if value is None:
            raise FaultError(f"slow_link {name}: needs a rate like 10M")
        try:
            rate_bps = int(value) if str(value).isdigit() else parse_rate_bps(value, what="slow_link rate")
        except UnitError as exc:
            raise FaultError(str(exc)) from None
        self._shape(link, rate_bps)
        self.slow_links[link_key(link.a, link.b)] = rate_bps
        return [link.a, link.b]

    def _restore_link(self, name: str) -> list[str]:
        """Back to the link's own rate, and (on an emulated link) no loss and the topology's delay."""
        link = self.link(name)
        if link_key(link.a, link.b) in self.flapping:
            self._link_up(name)
        self._shape(link, None)
        self.slow_links.pop(link_key(link.a, link.b), None)
        if link_key(link.a, link.b) in self.impaired:
            self._impair(name, "loss", "0")
            self._impair(name, "delay", "0")
        return [link.a, link.b]

    def _shape(self, link: LinkSpec, rate_bps: int | None) -> None:
        fab = self.fabric
        for node_name, port in ((link.a, link.a_port), (link.b, link.b_port)):
            if node_name in fab.net.switches:
                if node_name in self.stopped_switches:
                    continue
                cmds = fab.port_rate_commands(node_name, {port: rate_bps or link.rate_bps})
                fab.program_switch(node_name, [c for c in cmds if c.split()[1] == str(port)
                                               or c.split()[-1] == str(port)])
            else:
                host = fab.net.hosts[node_name]
                if rate_bps is None:
                    host.cmd(f"tc qdisc del dev {link.a_ifname} root 2>/dev/null")
                    continue
                wall_bps = int(fab.clock.wall_rate_bps(rate_bps))
                out = host.cmd(f"tc qdisc replace dev {link.a_ifname} root tbf rate {wall_bps}bit burst "
                               f"{TBF_BURST_BYTES} latency {TBF_LATENCY_US}us 2>&1; echo rc=$?")
                if not out.strip().endswith("rc=0"):
                    raise FaultError(f"slow_link {link.a}:{link.b}: tbf on {link.a_ifname} failed: {out.strip()}")

    def _impair(self, name: str, action: str, value: str | None) -> list[str]:
        """Loss % or extra delay on a link built through a link emulator (``emu.linkemu``): restart it."""
        link = self.link(name)
        key = link_key(link.a, link.b)
        wire = self.fabric.net.wires.get(key)
        if wire is None:
            raise FaultError(
                f"{action} {name}: this link has no link emulator (the P4 switch's traffic manager has no loss or"
                f" delay knob and this kernel has no tc netem); bring the fabric up with --impairable {name}"
                " (or --delay) to inject loss or delay on it")
        if value is None:
            raise FaultError(f"{action} {name}: needs a value (loss: percent 0..100; delay: e.g. 5ms, 0 to clear)")
        base_ns = self.fabric.spec.delay_ns
        try:
            if action == "loss":
                profile = replace(wire.profile, loss_pct=float(value))
            else:
                extra_ns = parse_duration_ns(value, what=f"delay {name}", default_unit="ns")
                profile = replace(wire.profile, delay_ns=base_ns + extra_ns)
        except ValueError as exc:   # UnitError, a bad float, or a WireProfile range check
            raise FaultError(f"{action} {name} {value}: {exc}") from None
        index = list(self.fabric.net.wires).index(key)
        try:
            wire.start(profile, self.fabric.clock, seed=self.fabric.spec.seed + index)
        except Exception as exc:
            raise FaultError(str(exc)) from None
        impaired = {"loss_pct": profile.loss_pct, "extra_delay_ns": profile.delay_ns - base_ns}
        if impaired["loss_pct"] or impaired["extra_delay_ns"]:
            self.impaired[key] = impaired
        else:
            self.impaired.pop(key, None)
        return [wire.node.name]

    def _slow_gpu(self, action: str, target: str, value: str | None) -> list[str]:
        """Set (or with factor 1 clear) a rank's compute factor in the fabric's straggler directory."""
        world = self.fabric.spec.servers * self.fabric.spec.gpus_per_server
        rank = int(target) if target.strip().isdigit() else -1
        if not 0 <= rank < world:
            raise FaultError(f"{action} {target}: expected a rank in 0..{world - 1}")
        if value is None:
            raise FaultError(f"{action} {target}: needs a FACTOR in 1..{MAX_FACTOR:g} (compute time x factor)")
        try:
            factor = float(value)
        except ValueError:
            factor = 0.0
        if not 1.0 <= factor <= MAX_FACTOR:   # also NaN
            raise FaultError(f"{action} {target} {value}: FACTOR must be in 1..{MAX_FACTOR:g} (compute time x factor)")
        try:
            set_compute_factor(self.straggler_dir, rank, factor)
        except (StragglerError, OSError) as exc:
            raise FaultError(f"{action} {target} {value}: {exc}") from None
        if factor == 1.0:
            self.slow_gpus.pop(rank, None)
        else:
            self.slow_gpus[rank] = factor
        return [f"rank{rank}"]

    def _nic_rank(self, action: str, nic: str) -> tuple[int, LinkSpec]:
        """The rank on NIC ``nic`` (``sN-ethG``: rank = N x GPUs + G) and the NIC's link."""
        link = next((lk for lk in self.fabric.topo.links if lk.kind == "host-leaf" and lk.a_ifname == nic), None)
        if link is None:
            raise FaultError(f"{action} {nic}: no such NIC (NICs are named SERVER-ethRAIL, e.g. "
                             f"{self.fabric.topo.links[0].a_ifname})")
        server = self.fabric.topo.servers.index(link.a)
        rail = int(nic.rsplit("-eth", 1)[1])
        return server * self.fabric.spec.gpus_per_server + rail, link

    @staticmethod
    def _nic_rate(action: str, nic: str, link: LinkSpec, value: str | None) -> int:
        """A RATE value (``30M``, or bit/s) in 1..the NIC link's rate, else a one-line ``FaultError``."""
        if value is None:
            raise FaultError(f"{action} {nic}: needs a RATE like 30M (at most the link's {link.rate_bps} bit/s)")
        try:
            rate_bps = int(value) if value.isdigit() else parse_rate_bps(value, what=f"{action} {nic} rate")
        except UnitError as exc:
            raise FaultError(str(exc)) from None
        if not 0 < rate_bps <= link.rate_bps:
            raise FaultError(f"{action} {nic} {value}: RATE must be in 1..{link.rate_bps} bit/s (the link's)")
        return rate_bps

    def _slow_nic(self, action: str, nic: str, value: str | None) -> list[str]:
        """Set (``value`` None: clear) the pacing rate of the rank's NIC in the fabric's straggler directory."""
        rank, link = self._nic_rank(action, nic)
        rate_bps = self._nic_rate(action, nic, link, value) if action == "slow_nic" else link.rate_bps
        try:
            set_nic_rate_share(self.straggler_dir, rank, rate_bps / link.rate_bps)
        except (StragglerError, OSError) as exc:
            raise FaultError(f"{action} {nic}: {exc}") from None
        if rate_bps == link.rate_bps:
            self.slow_nics.pop(nic, None)
        else:
            self.slow_nics[nic] = rate_bps
        return [f"rank{rank}"]

    def _flap(self, name: str, value: str | None) -> list[str]:
        """Start a thread that sets the link down and up every half period (network time) until stopped."""
        link = self.link(name)
        key = link_key(link.a, link.b)
        if value is None:
            raise FaultError(f"flap {name}: needs a PERIOD like 2s (network time, at least "
                             f"{MIN_FLAP_PERIOD_NS / 1e6:g} ms)")
        try:
            period_ns = parse_duration_ns(value, what=f"flap {name} period", default_unit="ns")
        except UnitError as exc:
            raise FaultError(str(exc)) from None
        if period_ns < MIN_FLAP_PERIOD_NS:
            raise FaultError(f"flap {name} {value}: PERIOD must be at least {MIN_FLAP_PERIOD_NS / 1e6:g} ms")
        if key in self.flapping:
            raise FaultError(f"flap {name}: already flapping (link_up {name} stops it)")
        stop = threading.Event()
        self.flapping[key] = stop
        threading.Thread(target=self._flap_loop, args=(link, period_ns // 2, stop), name=f"flap-{name}",
                         daemon=True).start()
        return [link.a, link.b]

    def _flap_loop(self, link: LinkSpec, half_ns: int, stop: threading.Event) -> None:
        """Down, wait half a period, up, wait, ... on the fabric's clock; each change logged as ``flap_down`` or
        ``flap_up``.  Ends when ``stop`` is set (under the lock, so it never changes the link after a link_up)."""
        clock = self.fabric.clock
        down = True
        while True:
            with self._lock:
                if stop.is_set():
                    return
                t_ns, utc = clock.now_ns(), _utc()
                try:
                    self._set_link_state(link, "down" if down else "up")
                    if down:
                        self.down_links.add(link_key(link.a, link.b))
                    else:
                        if link.kind == "host-leaf":
                            self._reconfigure_host(link.a)
                        self.down_links.discard(link_key(link.a, link.b))
                    changed, ok, detail = self._reroute(link), True, ""
                except Exception as exc:   # a node shell that went away: logged, and the flap ends
                    changed, ok, detail = [], False, str(exc)
                    stop.set()
                self._log(FaultEvent(utc, t_ns, "flap_down" if down else "flap_up", f"{link.a}:{link.b}", None, ok,
                                     detail, changed, clock.now_ns() - t_ns))
            down = not down
            stop.wait(clock.wall_duration_ns(half_ns) / 1e9)    # the half period in wall time; a stop wakes it

    def _congest(self, nic: str, value: str | None) -> list[str]:
        """Another tenant's RoCE stream at RATE from the next NIC of the same leaf and rail into ``nic``
        (``emu.tenant``: an RC QP in the lossless RoCE class, paced, honouring PFC pauses, DCQCN on CNPs), so the
        leaf's port toward ``nic`` is shared with the job's traffic (a congested switch port).  Its receiver runs
        in the target host's namespace beside the rank, on QP numbers of its own."""
        import subprocess
        import sys

        from emu.traffic import TrafficError, read_line
        from sw.clock import ENV_DILATION
        from sw.roce.softnic.pfc import nic_pfc_env

        _rank, link = self._nic_rank("congest", nic)
        rate_bps = self._nic_rate("congest", nic, link, value)
        if nic in self.congested:
            raise FaultError(f"congest {nic}: already congested (uncongest {nic} stops it)")
        nics = {n.ifname: n for n in self.fabric.topo.nics}
        dst = nics[nic]
        same_rail = [n for n in self.fabric.topo.nics if n.rail == dst.rail and n.leaf == dst.leaf]
        src = same_rail[(same_rail.index(dst) + 1) % len(same_rail)]
        if src is dst:
            raise FaultError(f"congest {nic}: no other NIC on its leaf {dst.leaf} to send from")
        store = Path(self.fabric.workdir) / TENANT_SUBDIR / nic
        if store.exists():            # a previous congest of this NIC: its rendezvous keys are stale
            for old in store.iterdir():
                old.unlink()
        store.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, ENV_DILATION: repr(float(self.fabric.clock.dilation)),
               **nic_pfc_env(self.fabric.spec.pfc_priority, os.environ)}
        procs = []
        for role, end in (("receiver", dst), ("sender", src)):
            log = (store.parent / f"{nic}.{role}.log").open("ab")
            proc = self.fabric.net.hosts[end.server].popen(
                [sys.executable, "-m", "emu.tenant", role, "--dev", end.ifname, "--store", str(store),
                 "--gateway-mac", end.gateway_mac, "--rate-bps", str(rate_bps)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env)
            log.close()
            self.fabric.helper_procs.append(proc)
            procs.append(proc)
        try:
            for proc, end in zip(procs, (dst, src), strict=True):
                read_line(self.fabric.clock, proc, end.server, "ready",
                          int(self.fabric.clock.net_duration_ns(TENANT_READY_WALL_NS)))
        except TrafficError as exc:
            for proc in reversed(procs):
                self._stop_helper(proc)
            raise FaultError(f"congest {nic}: the tenant's stream did not start ({exc}; log in {store.parent})") \
                from None
        self.congested[nic] = (procs, rate_bps)
        return [src.server, dst.leaf, dst.server]

    def _uncongest(self, nic: str) -> list[str]:
        self._nic_rank("uncongest", nic)
        if nic not in self.congested:
            raise FaultError(f"uncongest {nic}: not congested (congest {nic} RATE starts it)")
        procs, _rate = self.congested.pop(nic)
        for proc in reversed(procs):    # the sender first: the receiver still ACKs what is in flight
            self._stop_helper(proc)
        return [nic]

    def _stop_helper(self, proc: Any) -> None:
        """Stop a fault's helper process (``congest``'s blaster, ``pfc_storm``'s sender) and untrack it."""
        from emu.traffic import stop_proc

        stop_proc(proc)
        if proc in self.fabric.helper_procs:
            self.fabric.helper_procs.remove(proc)

    def pfc_storm(self, nic: str) -> FaultEvent:
        """The NIC ``HOST[:RAIL]`` (``s1:0``) sends PFC pauses of the fabric's lossless priority until restored."""
        return self.apply("pfc_storm", nic)

    def restore_pfc(self, nic: str) -> FaultEvent:
        return self.apply("restore_pfc", nic)

    def _host_nic(self, action: str, target: str) -> Any:
        """The NIC named ``HOST[:RAIL]`` (rail 0 when left out), else a one-line ``FaultError``."""
        host, _, rail = target.partition(":")
        nics = [n for n in self.fabric.topo.nics if n.server == host]
        rails = self.fabric.spec.rails
        if not nics or not (rail or "0").isdigit() or int(rail or "0") >= rails:
            raise FaultError(f"{action} {target}: expected HOST[:RAIL], a server s0..s{self.fabric.spec.servers - 1} "
                             f"and a rail 0..{rails - 1} (e.g. s1:0)")
        return next(n for n in nics if n.rail == int(rail or "0"))

    def _pfc_storm(self, target: str) -> list[str]:
        """Start the NIC's PFC storm: ``emu.pfc_storm`` in its host's namespace, tracked like the fabric's other
        helper processes (stopped by ``restore_pfc`` and by the fabric's teardown and crash cleanup)."""
        import subprocess
        import sys

        from sw.units.pfc_frame import PFC_MAX_QUANTA, quanta_to_ns

        nic = self._host_nic("pfc_storm", target)
        prio = self.fabric.spec.pfc_priority
        if prio is None:
            raise FaultError(f"pfc_storm {target}: this fabric runs without PFC, so its switches ignore PAUSE frames "
                             "(bring it up with --pfc on)")
        if nic.ifname in self.storming:
            raise FaultError(f"pfc_storm {target}: already storming (restore_pfc {target} stops it)")
        link = next(lk for lk in self.fabric.topo.links if lk.kind == "host-leaf" and lk.a_ifname == nic.ifname)
        interval_ns = max(1, quanta_to_ns(PFC_MAX_QUANTA, link.rate_bps) // PFC_STORM_REFRESHES)
        proc = self.fabric.net.hosts[nic.server].popen(
            [sys.executable, "-m", "emu.pfc_storm", "--dev", nic.ifname, "--mac", nic.mac, "--priority", str(prio),
             "--interval-ns", str(interval_ns)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.fabric.helper_procs.append(proc)
        self.storming[nic.ifname] = proc
        return [nic.server, nic.leaf]

    def _restore_pfc(self, target: str) -> list[str]:
        nic = self._host_nic("restore_pfc", target)
        proc = self.storming.pop(nic.ifname, None)
        if proc is None:
            raise FaultError(f"restore_pfc {target}: not storming (pfc_storm {target} starts it)")
        self._stop_helper(proc)      # 'quit': the tool sends XON, so the leaf's queue resumes at once
        return [nic.server, nic.leaf]

    def stop_flaps(self) -> None:
        """Stop every flapping link's thread, leaving each link as it is (the fabric's teardown)."""
        with self._lock:
            for stop in self.flapping.values():
                stop.set()
            self.flapping.clear()

    def _stop_flap(self, link: LinkSpec) -> None:
        """Stop the link's flapping (the caller holds the lock, so the thread changes nothing after this)."""
        stop = self.flapping.pop(link_key(link.a, link.b), None)
        if stop is not None:
            stop.set()

    def _switch_stop(self, name: str) -> list[str]:
        sw = self._switch(name)
        if name in self.stopped_switches:
            raise FaultError(f"switch_stop {name}: already stopped")
        sw.stop_process()
        self.stopped_switches.add(name)
        return [name]

    def _switch_start(self, name: str) -> list[str]:
        sw = self._switch(name)
        if name not in self.stopped_switches and sw.alive():
            raise FaultError(f"switch_start {name}: it is running")
        sw.stop_process()   # a switch killed from outside: reap its process before starting a new one
        sw.start([])
        self.stopped_switches.discard(name)
        fab = self.fabric
        degraded = DegradedTopology(fab.spec, self.down_links)
        overrides = {}
        for key, rate in self.slow_links.items():
            if name in key:
                link = self.link(":".join(sorted(key)))
                overrides[link.a_port if link.a == name else link.b_port] = rate
        fab.program_switch(name, _program_for(fab, degraded, name, overrides))
        return [name]

    # --- scripts and state -----------------------------------------------------------------------------------
    def run_script(self, text: str) -> list[FaultEvent]:
        """Replay ``[+T] ACTION TARGET [VALUE]`` lines (``#`` comments); T is network time from the start."""
        clock = self.fabric.clock
        start_ns = clock.now_ns()
        events = []
        for lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            words = line.split()
            at_ns = 0
            if words[0].startswith("+"):
                try:
                    at_ns = parse_duration_ns(words[0][1:], what=f"line {lineno} time", default_unit="s")
                except UnitError as exc:
                    raise FaultError(str(exc)) from None
                words = words[1:]
            if len(words) not in (2, 3):
                raise FaultError(f"fault script line {lineno}: {raw.strip()!r}: expected [+T] ACTION TARGET [VALUE]")
            clock.sleep_until_ns(start_ns + at_ns)
            events.append(self.apply(words[0], words[1], words[2] if len(words) == 3 else None))
        return events

    def active(self) -> dict[str, Any]:
        return {"down_links": sorted(":".join(sorted(k)) for k in self.down_links),
                "slow_links": {":".join(sorted(k)): v for k, v in self.slow_links.items()},
                "stopped_switches": sorted(self.stopped_switches),
                "impaired_links": {":".join(sorted(k)): v for k, v in self.impaired.items()},
                "slow_gpus": {str(rank): f for rank, f in sorted(self.slow_gpus.items())},
                "slow_nics": dict(sorted(self.slow_nics.items())),
                "flapping_links": sorted(":".join(sorted(k)) for k in self.flapping),
                "congested_nics": {nic: rate for nic, (_proc, rate) in sorted(self.congested.items())},
                "pfc_storms": sorted(self.storming)}

    def _log(self, event: FaultEvent) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as f:
            f.write(json.dumps(asdict(event)) + "\n")


def _program_for(fab: Fabric, topo: DegradedTopology, switch: str, rate_overrides: dict[int, int]) -> list[str]:
    from emu.control_plane import switch_commands

    return switch_commands(topo, switch, fab.ecn, fab.int_cfg) + fab.port_rate_commands(switch, rate_overrides)


def _utc() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")

