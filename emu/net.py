"""Builds the Mininet network of a fabric from a ``Topology``: hosts with every NIC, P4 switches, plain veths.

Every node (hosts and switches) lives in its own network namespace, so the fabric's interfaces never appear in
the root namespace and parallel fabrics cannot collide even with the plain names ``s<i>-eth<r>`` and
``p<p>l<r>-eth<port>`` of ``sw.collectives.fabric_topology``.  Links are plain veth pairs (no TCLink/netem):
queues build inside the P4 switches, which shape each egress port to its line rate.  Links asked for as
impairable go through a link-emulator node (``emu.linkemu``); in INT report mode a collector host ``col`` has
one NIC on every leaf.

Host addressing (see ``sw.collectives.fabric_topology`` for the address plan): each NIC gets its ``/24``; the leaf
of its rail is its gateway.  Neighbour entries are static (``nud permanent``) for the gateway and for every peer
of the same ``/24`` (mapped to the gateway's MAC: the leaf routes at L3), so hosts never ARP.  Policy routing
gives every rail its own table (``100 + rail``, rule ``from <nic ip>``), so traffic leaves by the NIC of its
source address; without a source address, a destination on rail r leaves by the host's NIC on rail r.  Servers
are ``RoceHost`` nodes; topology scripts use the same class (``host_nic``, ``setup_nics``) and ``stop_mininet``
for teardown.
"""

from __future__ import annotations

import ipaddress
import os
import sys
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from mininet.link import Link
from mininet.net import Mininet

from emu.linkemu import WiredLink, add_wired_link
from emu.p4switch import P4Host, P4Switch
from emu.reap import start_time as _start_time
from sw.collectives.fabric_topology import FabricNic, Topology, switch_port_mac

FABRIC_PRIORITY_QUEUES = 8   # embedded switches: one TM queue per PFC priority (a pause holds only its own)

COLLECTOR = "col"
RAIL_TABLE_BASE = 100
RAIL_RULE_PREF_BASE = 1000
FABRIC_SUPERNET = "10.0.0.0/8"


class NetBuildError(RuntimeError):
    """Building or configuring the Mininet network failed; the message names the node and the command."""


@dataclass
class FabricNet:
    """A built Mininet network of one fabric: its hosts and switches by topology name."""

    topo: Topology
    net: Mininet
    hosts: dict[str, RoceHost] = field(default_factory=dict)
    switches: dict[str, P4Switch] = field(default_factory=dict)
    workdir: Path = field(default_factory=Path)
    collector: P4Host | None = None          # INT report collector: one NIC per leaf (report mode only)
    collector_ifnames: dict[str, str] = field(default_factory=dict)   # leaf -> collector NIC
    collector_port: int | None = None         # the leaves' port toward the collector
    wires: dict[frozenset[str], WiredLink] = field(default_factory=dict)   # links through a link emulator

    def nodes(self) -> list[P4Host | P4Switch]:
        """Every Mininet node of the fabric (servers, switches, link emulators, the collector if any)."""
        return [*self.hosts.values(), *self.switches.values(), *(w.node for w in self.wires.values()),
                *([self.collector] if self.collector else [])]

    def node(self, name: str) -> P4Host | P4Switch:
        if name in self.hosts:
            return self.hosts[name]
        if name in self.switches:
            return self.switches[name]
        raise KeyError(name)

    def node_pids(self) -> dict[str, int]:
        """PID of each node's shell (its network namespace lives as long as processes in it do)."""
        return {node.name: node.pid for node in self.nodes()}


@dataclass(frozen=True)
class Footprint:
    """What a fabric created on the machine: node/switch PIDs, network namespace inodes, interface names."""

    pids: tuple[int, ...]
    netns_inodes: tuple[int, ...]
    ifnames: tuple[str, ...]


def footprint(fnet: FabricNet) -> Footprint:
    """Record the fabric's processes, namespaces and interfaces (call while it runs)."""
    pids = [n.pid for n in fnet.nodes()]
    pids += [sw.proc.pid for sw in fnet.switches.values() if sw.proc is not None]
    pids += [w.proc.pid for w in fnet.wires.values() if w.proc is not None]
    inodes = {os.stat(f"/proc/{n.pid}/ns/net").st_ino for n in fnet.nodes()}
    ifnames = [lk.a_ifname for lk in fnet.topo.links] + [lk.b_ifname for lk in fnet.topo.links]
    ifnames += list(fnet.collector_ifnames.values())
    ifnames += [i for w in fnet.wires.values() for i in (w.if_a, w.if_b)]
    return Footprint(tuple(pids), tuple(sorted(inodes)), tuple(ifnames))


def leftovers(fp: Footprint) -> list[str]:
    """What of ``fp`` still exists: live processes, namespaces any process still holds, interfaces in the
    root namespace with our names (empty after a clean teardown)."""
    out = []
    for pid in fp.pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.append(f"process {pid} still running")
    wanted = set(fp.netns_inodes)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ino = os.stat(proc / "ns" / "net").st_ino
        except OSError:
            continue
        if ino in wanted:
            out.append(f"network namespace {ino} still held by pid {proc.name}")
    root_ifs = set(os.listdir("/sys/class/net"))
    out += [f"interface {name} in the root namespace" for name in fp.ifnames if name in root_ifs]
    return out


def tracked_processes(fnet: FabricNet) -> list[tuple[int, int]]:
    """(pid, start time) of every switch process and node shell of the fabric, for a later ``stop_tracked``."""
    pids = [sw.proc.pid for sw in fnet.switches.values() if sw.proc is not None]
    pids += [w.proc.pid for w in fnet.wires.values() if w.proc is not None]
    pids += [n.pid for n in fnet.nodes()]
    return [(pid, t) for pid in pids if (t := _start_time(pid)) is not None]


def host_batch(topo: Topology, server: str) -> list[str]:
    """``ip -batch`` lines that configure one server of ``topo``: every NIC's ``nic_batch`` with its leaf's other
    NICs as static neighbours and the other pods' subnets of its rail routed through its gateway."""
    spec = topo.spec
    lines: list[str] = []
    for nic in topo.nics_of(server):
        lines += nic_batch(nic, spec.mtu, peer_ips=[p.ip for p in _subnet_peers(topo, nic)],
                           routes=[f"10.{pod}.{nic.rail}.0/24" for pod in range(spec.pods) if pod != nic.pod])
    return lines


def nic_batch(nic: FabricNic, mtu: int, *, peer_ips: Iterable[str] = (), routes: Iterable[str] = ()) -> list[str]:
    """``ip -batch`` lines giving one NIC the fabric's settings: MTU + ``INT_HEADROOM_BYTES``, its MAC and
    address, static neighbours (``nud permanent``: the gateway and ``peer_ips``, all at the gateway's MAC),
    its rail's routing table ``100 + rail`` (``FABRIC_SUPERNET`` via the gateway, rule ``from <ip>``) and
    ``routes`` (subnets) via the gateway.

    The NIC's MTU leaves room for INT stacks the switches add to packets in flight, while every route locks
    the path MTU at ``mtu``, so the host itself never sends more than ``mtu`` bytes of IP.
    """
    lock = f"mtu lock {mtu}"
    table = RAIL_TABLE_BASE + nic.rail
    subnet = str(ipaddress.ip_interface(f"{nic.ip}/{nic.prefix_len}").network)
    lines = [
        f"link set dev {nic.ifname} mtu {mtu + INT_HEADROOM_BYTES}",
        f"link set dev {nic.ifname} address {nic.mac}",
        f"addr replace {nic.ip}/{nic.prefix_len} dev {nic.ifname}",
        f"link set dev {nic.ifname} up",
        f"route replace {subnet} dev {nic.ifname} proto kernel scope link src {nic.ip} {lock}",
        f"neigh replace {nic.gateway_ip} lladdr {nic.gateway_mac} dev {nic.ifname} nud permanent",
    ]
    lines += [f"neigh replace {ip} lladdr {nic.gateway_mac} dev {nic.ifname} nud permanent" for ip in peer_ips]
    lines += [
        f"route replace {FABRIC_SUPERNET} via {nic.gateway_ip} dev {nic.ifname} src {nic.ip} table {table} {lock}",
        f"rule add from {nic.ip} lookup {table} pref {RAIL_RULE_PREF_BASE + nic.rail}",
    ]
    lines += [f"route replace {r} via {nic.gateway_ip} dev {nic.ifname} src {nic.ip} {lock}" for r in routes]
    return lines


def host_nic(ifname: str, address: str, gateway_mac: str, *, rail: int = 0, gateway_ip: str | None = None,
             mac: str | None = None) -> FabricNic:
    """A NIC of a ``RoceHost`` in a topology of your own: ``host_nic("h1-eth0", "10.0.1.1/24", "02:..")``.
    ``gateway_ip`` defaults to ``.254`` of the NIC's /24 (the fabric's plan); ``mac`` to the interface's own."""
    iface = ipaddress.ip_interface(address)
    if iface.network.prefixlen == 32:
        raise NetBuildError(f"NIC {ifname}: address {address!r}: give ADDR/PREFIX, e.g. 10.0.1.1/24")
    gw = gateway_ip or str(iface.network.network_address + (254 if iface.network.prefixlen <= 24 else 1))
    return FabricNic(server=ifname.split("-eth")[0], rail=rail, pod=0, slot=0, ifname=ifname, ip=str(iface.ip),
               mac=mac or "", prefix_len=iface.network.prefixlen, gateway_ip=gw, gateway_mac=gateway_mac,
               leaf="", leaf_port=0)


class RoceHost(P4Host):
    """A Mininet host with the fabric servers' NIC settings: a ``P4Host`` (checksum/segmentation offloads off,
    IPv6 off) whose NICs get the MTU plus INT headroom, static neighbours (no ARP: frames go to the gateway's
    MAC), per-rail policy routing (table ``100 + rail``, traffic leaves by the NIC of its source address) and
    the sysctls a multi-homed RoCE host needs (no reverse-path filter, ARP only on the asked interface).

    Every server of ``Fabric`` is one.  In a topology of your own, after ``net.build()`` (or ``net.start()``)::

        h1 = net.addHost("h1", cls=RoceHost, ip=None)
        net.addLink(h1, sw, intfName1="h1-eth0", port2=1)
        net.start()
        h1.setup_nics([host_nic("h1-eth0", "10.0.1.1/24", gateway_mac=sw.intfs[1].MAC())], mtu=1500,
                      routes=["10.0.2.0/24"])
    """

    def setup_nics(self, nics: list[FabricNic], *, mtu: int = 1500, peer_ips: Iterable[str] = (),
                   routes: Iterable[str] = ()) -> None:
        """Configure ``nics`` (``host_nic``) with ``nic_batch``: ``peer_ips`` get static neighbours on each
        NIC's subnet, ``routes`` (e.g. ``10.0.2.0/24``) go via each NIC's gateway; raises ``NetBuildError``."""
        lines: list[str] = []
        for nic in nics:
            nic = nic if nic.mac else replace(nic, mac=self.intf(nic.ifname).MAC())
            subnet = ipaddress.ip_interface(f"{nic.ip}/{nic.prefix_len}").network
            lines += nic_batch(nic, mtu, peer_ips=[ip for ip in peer_ips if ipaddress.ip_address(ip) in subnet],
                               routes=routes)
        with tempfile.NamedTemporaryFile("w", prefix=f"starpulse-{self.name}-", suffix=".ip-batch") as batch:
            batch.write("\n".join(lines) + "\n")
            batch.flush()
            self.apply_batch(batch.name)
        for nic in nics:   # Mininet's own view: node.IP() is the first NIC's, `dump` shows every NIC's address
            intf = self.intf(nic.ifname)
            intf.ip, intf.prefixLen = nic.ip, nic.prefix_len

    def apply_batch(self, path: str | Path) -> None:
        """Set ``HOST_SYSCTLS`` and run one ``ip -batch`` file in this host; the failing line is reported."""
        out = self.cmd(f"sysctl -qw {' '.join(HOST_SYSCTLS)} ; ip -batch {path} 2>&1 ; echo rc=$?")
        if not out.strip().endswith("rc=0"):
            raise NetBuildError(f"host {self.name}: configuring with {path} failed: {out.strip()[-500:]}")


def _subnet_peers(topo: Topology, nic: FabricNic) -> list[FabricNic]:
    return [n for n in topo.nics if n.leaf == nic.leaf and n is not nic]


INT_HEADROOM_BYTES = 256   # interfaces carry frames this much above the MTU: INT stacks grow packets in flight

HOST_SYSCTLS = (
    "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",   # multi-homed: replies by rail
    "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2",
    "net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
)


def build_net(topo: Topology, *, program: str, backend: str = "embedded", workdir: Path,
              log_level: str = "warn", pcap_dir: str | None = None, collector_port: int | None = None,
              wired: set[frozenset[str]] | None = None, control: str = "cli") -> FabricNet:
    """Create (but do not start) the Mininet net: one P4Host per server, one P4Switch per leaf/spine, the links
    in ``wired`` spliced through a link-emulator node, and with ``collector_port`` an INT collector host wired
    to that port of every leaf."""
    wired = wired or set()
    net = Mininet(topo=None, controller=None, build=False, host=P4Host, switch=P4Switch, link=Link,
                  autoSetMacs=False, autoStaticArp=False, waitConnected=False)
    fnet = FabricNet(topo, net, workdir=workdir)
    try:
        for server in topo.servers:
            fnet.hosts[server] = net.addHost(server, cls=RoceHost, ip=None, mac=None, inNamespace=True)
        for sw in topo.switches:
            fnet.switches[sw.name] = net.addSwitch(
                sw.name, cls=P4Switch, program=program, backend=backend, device_id=sw.device_id,
                dpid=f"{sw.device_id:016x}", inNamespace=True, log_level=log_level,
                log_file=str(workdir / f"{sw.name}.log"), pcap_dir=pcap_dir, control=control,
                priority_queues=FABRIC_PRIORITY_QUEUES if backend == "embedded" else 1)
        for link in topo.links:
            node_a, node_b = fnet.node(link.a), fnet.node(link.b)
            a_is_host = link.a in fnet.hosts
            port_a = int(link.a_ifname.rsplit("eth", 1)[1]) if a_is_host else link.a_port
            mac_a = (next(n.mac for n in topo.nics if n.ifname == link.a_ifname) if a_is_host
                     else switch_port_mac(topo.switch(link.a).device_id, link.a_port))
            mac_b = switch_port_mac(topo.switch(link.b).device_id, link.b_port)
            key = frozenset((link.a, link.b))
            if key not in wired:
                net.addLink(node_a, node_b, port1=port_a, port2=link.b_port, intfName1=link.a_ifname,
                            intfName2=link.b_ifname, addr1=mac_a, addr2=mac_b, cls=Link)
                continue
            fnet.wires[key] = add_wired_link(net, node_a, node_b, index=len(fnet.wires), port_a=port_a,
                                             port_b=link.b_port, ifname_a=link.a_ifname, ifname_b=link.b_ifname,
                                             mac_a=mac_a, mac_b=mac_b)
        if collector_port is not None:
            fnet.collector_port = collector_port
            fnet.collector = net.addHost(COLLECTOR, cls=P4Host, ip=None, mac=None, inNamespace=True)
            for k, leaf in enumerate(topo.leaves):
                ifname = f"{COLLECTOR}-eth{k}"
                net.addLink(fnet.collector, fnet.switches[leaf.name], port1=k, port2=collector_port,
                            intfName1=ifname, intfName2=f"{leaf.name}-eth{collector_port}",
                            addr1=f"02:53:fe:{k >> 8:02x}:{k & 0xff:02x}:01",
                            addr2=switch_port_mac(leaf.device_id, collector_port), cls=Link)
                fnet.collector_ifnames[leaf.name] = ifname
    except BaseException:
        stop_net(fnet)
        raise
    return fnet


def configure_hosts(fnet: FabricNet) -> None:
    """Addresses, static neighbours and policy routing on every host, one ``ip -batch`` per host."""
    fnet.net.build()
    for server, host in fnet.hosts.items():
        batch = fnet.workdir / f"{server}.ip-batch"
        batch.write_text("\n".join(host_batch(fnet.topo, server)) + "\n")
        host.apply_batch(batch)
        for nic in fnet.topo.nics_of(server):   # Mininet's own view: node.IP() is the rail-0 NIC's (eth0 is
            intf = host.intf(nic.ifname)        # the default interface), `dump` shows every NIC's address
            intf.ip, intf.prefixLen = nic.ip, nic.prefix_len


def configure_switch_ports(fnet: FabricNet) -> None:
    """MTU (with INT headroom) and up on every switch port (``P4Switch.start`` turns their offloads off)."""
    mtu = fnet.topo.spec.mtu + INT_HEADROOM_BYTES
    for name, sw in fnet.switches.items():
        script = "; ".join(f"ip link set dev {ifname} mtu {mtu} up" for ifname in fnet.topo.ports_of(name).values())
        if name in fnet.collector_ifnames:
            script += f"; ip link set dev {name}-eth{fnet.collector_port} mtu {mtu} up"
        out = sw.cmd(f"{script}; sysctl -qw net.ipv6.conf.all.disable_ipv6=1; echo rc=$?")
        if not out.strip().endswith("rc=0"):
            raise NetBuildError(f"switch {name}: configuring ports failed: {out.strip()[-500:]}")


def configure_wires(fnet: FabricNet) -> None:
    """Link-emulator interfaces: MTU (INT-grown frames pass through too) and up."""
    for w in fnet.wires.values():
        w.configure(fnet.topo.spec.mtu + INT_HEADROOM_BYTES)


def configure_collector(fnet: FabricNet) -> None:
    """The collector's NICs: up, promiscuous (reports keep the original addresses), IPv6 off, no addresses."""
    if fnet.collector is None:
        return
    mtu = fnet.topo.spec.mtu + INT_HEADROOM_BYTES
    script = "; ".join(f"ip link set dev {i} mtu {mtu} promisc on up" for i in fnet.collector_ifnames.values())
    out = fnet.collector.cmd(f"{script}; echo rc=$?")
    if not out.strip().endswith("rc=0"):
        raise NetBuildError(f"collector: configuring NICs failed: {out.strip()[-500:]}")


def start_switches(fnet: FabricNet, parallel: int = 4) -> None:
    """Start every switch process (a few at a time: each one waits for its program to load)."""
    env_path = str(Path(__file__).resolve().parents[1])
    if env_path not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [env_path, os.environ.get("PYTHONPATH")]))
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        futures = {name: pool.submit(sw.start, []) for name, sw in fnet.switches.items()}
        errors = []
        for name, fut in futures.items():
            exc = fut.exception()
            if exc is not None:
                errors.append(f"{name}: {exc}")
    if errors:
        raise NetBuildError("switches failed to start: " + "; ".join(errors))


def stop_net(fnet: FabricNet) -> None:
    """Stop link emulators and switch processes, delete links and end every node shell: removes all namespaces
    we made."""
    stop_mininet(fnet.net, fnet.wires.values())


def stop_mininet(net: Mininet, wired_links: Iterable[WiredLink] = ()) -> None:
    """Tear down a Mininet net of P4 switches, bridges, hosts and ``wired_links`` (``add_wired_link``: their
    emulator processes are ours, not the nodes') in a topology script's ``finally``, also when a Ctrl-C left a
    node's shell in the middle of a command: that command is interrupted, every link emulator and ``P4Switch``
    process stopped, then Mininet's own stop (links, bridges, shells); should it fail, every shell is ended."""
    for w in wired_links:
        w.stop()
    for node in [*net.hosts, *net.switches]:
        if node.shell is not None and node.waiting:   # interrupted mid-command: Mininet refuses the next one
            try:
                node.sendInt()
                node.waitOutput()
            except Exception:  # terminate() below ends it anyway
                node.waiting = False
    for sw in net.switches:
        if not isinstance(sw, P4Switch):
            continue
        try:
            sw.stop_process()
        except Exception as exc:  # keep tearing down the rest
            print(f"warning: stopping switch {sw.name}: {exc}", file=sys.stderr)
    try:
        net.stop()
    except Exception as exc:
        print(f"warning: mininet stop: {exc}", file=sys.stderr)
        for node in [*net.switches, *net.hosts]:
            try:
                node.terminate()
            except Exception:
                pass
