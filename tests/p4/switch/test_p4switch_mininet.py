"""The Mininet P4Switch node: embedded backend forwards between P4Hosts with the tutorial-style command file;
the BMv2 backend, not installed here, fails with a message naming what is missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from emu.p4switch import P4Host, P4Switch, P4SwitchError, missing_bmv2_tools

pytestmark = pytest.mark.emu

PROGRAMS = Path(__file__).resolve().parents[3] / "p4" / "programs"


def _links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def test_embedded_p4switch_node_forwards_ping_and_cleans_up(tmp_path) -> None:
    from mininet.net import Mininet

    tag = f"q{os.getpid() % 10000}"
    net = Mininet(controller=None, build=False, autoSetMacs=False, autoStaticArp=False)
    try:
        h1 = net.addHost(f"{tag}h1", cls=P4Host, ip="10.0.1.1/24", mac="08:00:00:00:01:11")
        h2 = net.addHost(f"{tag}h2", cls=P4Host, ip="10.0.2.2/24", mac="08:00:00:00:02:22")
        s1 = net.addSwitch(f"{tag}s1", cls=P4Switch, dpid="1", program=str(PROGRAMS / "basic.p4"),
                           commands=str(PROGRAMS / "basic.commands.txt"), pcap_dir=str(tmp_path))
        net.addLink(h1, s1, port2=1)
        net.addLink(h2, s1, port2=2)
        net.build()
        net.start()
        for h, other, gw_mac in ((h1, "10.0.2.2", "08:00:00:00:01:00"), (h2, "10.0.1.1", "08:00:00:00:02:00")):
            h.cmd(f"ip route add {other}/32 dev {h.defaultIntf().name}")
            h.cmd(f"ip neigh add {other} lladdr {gw_mac} dev {h.defaultIntf().name}")
        out = h1.cmd("ping -c 3 -i 0.2 -W 2 10.0.2.2")
        assert " 0% packet loss" in out, out
        assert "MyIngress.ipv4_lpm" in s1.cli("show_tables")
        stats = s1.cli("port_stats 2")
        assert stats.splitlines()[1].split()[1] == f"{tag}s1-eth2"
        assert (tmp_path / f"{tag}s1-eth1_in.pcap").exists()
        proc = s1.proc
        assert proc is not None and proc.poll() is None
    finally:
        net.stop()
    assert proc.poll() is not None                              # the switch process is gone
    assert not {n for n in _links() if n.startswith(tag)}      # and so are its interfaces


def test_bmv2_backend_names_the_missing_tools(tmp_path) -> None:
    missing = missing_bmv2_tools()
    if not missing:
        pytest.skip("BMv2 is installed here")
    with pytest.raises(P4SwitchError) as info:
        P4Switch("s9", program=str(PROGRAMS / "basic.p4"), backend="bmv2")
    msg = str(info.value)
    assert all(tool in msg for tool in missing) and "backend='embedded'" in msg


def test_unknown_backend_and_missing_program_are_clear_errors() -> None:
    with pytest.raises(P4SwitchError, match="backend 'tofino'"):
        P4Switch("s9", program=str(PROGRAMS / "basic.p4"), backend="tofino")
    with pytest.raises(P4SwitchError, match="does not exist"):
        P4Switch("s9", program="/nonexistent.p4")
