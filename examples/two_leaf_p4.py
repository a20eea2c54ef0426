"""A topology of your own: two leaf P4 switches running p4/programs/basic.p4, one RoCE host on each, pings across.

    h1 (10.0.1.1) -- port 1 [l1] port 2 -- port 2 [l2] port 1 -- h2 (10.0.2.2)

    sudo .venv/bin/python examples/two_leaf_p4.py
"""

import sys
import tempfile
from pathlib import Path

from mininet.link import Link
from mininet.net import Mininet

from emu.net import RoceHost, host_nic, stop_mininet
from emu.p4switch import P4Switch
from emu.status import parse_port_stats

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
    try:
        l1, l2 = (net.addSwitch(name, cls=P4Switch, program=BASIC_P4, commands=command_file(workdir, name),
                                inNamespace=True, dpid=f"{i + 1:016x}") for i, name in enumerate(("l1", "l2")))
        h1, h2 = (net.addHost(name, cls=RoceHost, ip=None) for name in ("h1", "h2"))
        net.addLink(h1, l1, port2=1, intfName1="h1-eth0", addr1=MAC["h1"], addr2=MAC["l1-1"], cls=Link)
        net.addLink(h2, l2, port2=1, intfName1="h2-eth0", addr1=MAC["h2"], addr2=MAC["l2-1"], cls=Link)
        net.addLink(l1, l2, port1=2, port2=2, addr1=MAC["l1-2"], addr2=MAC["l2-2"], cls=Link)
        net.start()   # builds the namespaces and links, starts both switches with their command files
        h1.setup_nics([host_nic("h1-eth0", "10.0.1.1/24", gateway_mac=MAC["l1-1"])], routes=["10.0.2.0/24"])
        h2.setup_nics([host_nic("h2-eth0", "10.0.2.2/24", gateway_mac=MAC["l2-1"])], routes=["10.0.1.0/24"])
        out = h1.cmd("ping -c 3 -i 0.2 -W 2 10.0.2.2")
        print(out.strip().splitlines()[-2])
        for port, c in sorted(parse_port_stats(l1.cli("port_stats")).items())[1:]:   # port 0: none here
            print(f"l1 port {port}: rx {c['rx_pkts']} tx {c['tx_pkts']} packets")
        return 0 if " 0% packet loss" in out else 1
    except KeyboardInterrupt:
        print("interrupted: tearing down", file=sys.stderr)
        return 130
    finally:
        stop_mininet(net)   # stops the switch processes, deletes links, ends every namespace
        for f in workdir.iterdir():
            f.unlink()
        workdir.rmdir()


if __name__ == "__main__":
    sys.exit(main())
