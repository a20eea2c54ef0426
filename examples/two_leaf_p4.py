"""A topology of your own: two leaf P4 switches running p4/programs/basic.p4, one RoCE host on each, pings across
a leaf-to-leaf link that a link emulator delays by 5 ms each way.

    h1 (10.0.1.1) -- port 1 [l1] port 2 -- (5 ms) -- port 2 [l2] port 1 -- h2 (10.0.2.2)

    sudo .venv/bin/python examples/two_leaf_p4.py
"""

import sys
import tempfile
from pathlib import Path

from mininet.link import Link
from mininet.net import Mininet

from emu.linkemu import add_wired_link
from emu.net import INT_HEADROOM_BYTES, RoceHost, host_nic, stop_mininet
from emu.p4switch import P4Switch
from emu.status import parse_port_stats
from emu.wire import WireProfile
from sw.clock import get_clock

BASIC_P4 = str(Path(__file__).resolve().parents[1] / "p4" / "programs" / "basic.p4")
MAC = {"h1": "02:00:00:00:00:11", "h2": "02:00:00:00:00:22",       # hosts
       "l1-1": "02:00:00:00:01:01", "l1-2": "02:00:00:00:01:02",   # leaf l1's ports 1 and 2
       "l2-1": "02:00:00:00:02:01", "l2-2": "02:00:00:00:02:02"}
ROUTES = {   # basic.p4's one table: destination prefix => next hop's MAC, egress port
    "l1": [("10.0.1.1/32", MAC["h1"], 1), ("10.0.2.0/24", MAC["l2-2"], 2)],
    "l2": [("10.0.2.2/32", MAC["h2"], 1), ("10.0.1.0/24", MAC["l1-2"], 2)],
}


def command_file(workdir: Path, switch: str) -> str:
    """The switch's simple_switch_CLI command file (the same file would program BMv2)."""
    path = workdir / f"{switch}.txt"
    path.write_text("".join(f"table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward {prefix} => {mac} {port}\n"
                            for prefix, mac, port in ROUTES[switch]))
    return str(path)


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="starpulse-two-leaf-"))
    net = Mininet(topo=None, controller=None, build=False, autoSetMacs=False, waitConnected=False)
    wires = []
    try:
        l1, l2 = (net.addSwitch(name, cls=P4Switch, program=BASIC_P4, commands=command_file(workdir, name),
                                inNamespace=True, dpid=f"{i + 1:016x}") for i, name in enumerate(("l1", "l2")))
        h1, h2 = (net.addHost(name, cls=RoceHost, ip=None) for name in ("h1", "h2"))
        net.addLink(h1, l1, port2=1, intfName1="h1-eth0", addr1=MAC["h1"], addr2=MAC["l1-1"], cls=Link)
        net.addLink(h2, l2, port2=1, intfName1="h2-eth0", addr1=MAC["h2"], addr2=MAC["l2-1"], cls=Link)
        wires.append(add_wired_link(net, l1, l2, index=0, port_a=2, port_b=2, mac_a=MAC["l1-2"], mac_b=MAC["l2-2"]))
        net.start()   # builds the namespaces and links, starts both switches with their command files
        wires[0].configure(mtu=1500 + INT_HEADROOM_BYTES)
        wires[0].start(WireProfile(delay_ns=5_000_000), get_clock(), seed=1)   # both directions, network time
        h1.setup_nics([host_nic("h1-eth0", "10.0.1.1/24", gateway_mac=MAC["l1-1"])], routes=["10.0.2.0/24"])
        h2.setup_nics([host_nic("h2-eth0", "10.0.2.2/24", gateway_mac=MAC["l2-1"])], routes=["10.0.1.0/24"])
        out = h1.cmd("ping -c 3 -i 0.2 -W 2 10.0.2.2")
        print("\n".join(out.strip().splitlines()[-2:]))   # the counts and rtt min/avg/max/mdev (>= 10 ms)
        stats = parse_port_stats(l1.cli("port_stats"))   # counters by port number
        for port in (1, 2):
            print(f"l1 port {port}: rx {stats[port]['rx_pkts']} tx {stats[port]['tx_pkts']} packets")
        return 0 if " 0% packet loss" in out else 1
    except KeyboardInterrupt:
        print("interrupted: tearing down", file=sys.stderr)
        return 130
    finally:
        stop_mininet(net, wires)   # stops the emulator and switch processes, deletes links, ends every namespace
        for f in workdir.iterdir():
            f.unlink()
        workdir.rmdir()


if __name__ == "__main__":
    sys.exit(main())
