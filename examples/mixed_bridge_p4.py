"""A mixed topology: a Linux bridge joins two RoCE hosts at layer 2, a P4 switch (basic.p4) routes them to a third.

    h1 (10.0.1.1) --+
                    [br] -- port 1 [p4] port 2 -- h3 (10.0.2.3)
    h2 (10.0.1.2) --+

    sudo .venv/bin/python examples/mixed_bridge_p4.py
"""

import sys
import tempfile
from pathlib import Path

from mininet.link import Link
from mininet.net import Mininet
from mininet.nodelib import LinuxBridge

from emu.net import RoceHost, host_nic, stop_mininet
from emu.p4switch import P4Switch

BASIC_P4 = str(Path(__file__).resolve().parents[1] / "p4" / "programs" / "basic.p4")
MAC = {"h1": "02:00:00:00:00:01", "h2": "02:00:00:00:00:02", "h3": "02:00:00:00:00:03",
       "p4-1": "02:00:00:00:04:01", "p4-2": "02:00:00:00:04:02"}   # the P4 switch's ports 1 and 2
COMMANDS = "".join(f"table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward {ip}/32 => {MAC[h]} {port}\n"
                   for h, ip, port in (("h1", "10.0.1.1", 1), ("h2", "10.0.1.2", 1), ("h3", "10.0.2.3", 2)))


def main() -> int:
    with tempfile.NamedTemporaryFile("w", prefix="starpulse-mixed-", suffix=".txt") as commands:
        commands.write(COMMANDS)
        commands.flush()
        net = Mininet(topo=None, controller=None, build=False, autoSetMacs=False, waitConnected=False)
        try:
            return run(net, commands.name)
        except KeyboardInterrupt:
            print("interrupted: tearing down", file=sys.stderr)
            return 130
        finally:
            stop_mininet(net)   # deletes the bridge, stops the P4 switch, ends every namespace


def run(net: Mininet, commands: str) -> int:
    br = net.addSwitch("br", cls=LinuxBridge, inNamespace=True, dpid="2")   # the kernel's bridge, own namespace
    p4 = net.addSwitch("p4", cls=P4Switch, program=BASIC_P4, commands=commands, inNamespace=True, dpid="1")
    h1, h2, h3 = (net.addHost(name, cls=RoceHost, ip=None) for name in ("h1", "h2", "h3"))
    for h in (h1, h2):
        net.addLink(h, br, intfName1=f"{h.name}-eth0", addr1=MAC[h.name], cls=Link)
    net.addLink(br, p4, port2=1, addr2=MAC["p4-1"], cls=Link)
    net.addLink(h3, p4, port2=2, intfName1="h3-eth0", addr1=MAC["h3"], addr2=MAC["p4-2"], cls=Link)
    net.start()
    for h, ip, gw_mac, other in ((h1, "10.0.1.1/24", "p4-1", "10.0.2.0/24"), (h2, "10.0.1.2/24", "p4-1", "10.0.2.0/24"),
                                 (h3, "10.0.2.3/24", "p4-2", "10.0.1.0/24")):
        h.setup_nics([host_nic(f"{h.name}-eth0", ip, gateway_mac=MAC[gw_mac])], routes=[other])
    ok = True
    for src, dst, via in ((h1, "10.0.1.2", "the bridge"), (h1, "10.0.2.3", "bridge + P4"),
                          (h2, "10.0.2.3", "bridge + P4")):
        out = src.cmd(f"ping -c 2 -i 0.2 -W 2 {dst}")   # same /24: ARP across the bridge; else the P4 gateway
        ok &= " 0% packet loss" in out
        print(f"{src.name} -> {dst} via {via}: {out.strip().splitlines()[-2]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
