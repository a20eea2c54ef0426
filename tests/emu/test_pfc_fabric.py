"""PFC as a fabric option: the flags, the switch commands they become, and a congested leaf port pausing its
sender (the pauses in `fabric status` per link and in the pcaps, decoded by tshark); PFC off drops instead."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from emu.checks import congest
from emu.cli import FabricCliError, _print_pfc, add_topology_arguments, pfc_from_args, spec_from_args
from emu.fabric import Fabric, FabricError, PfcSettings
from emu.launch import fabric_env
from sw.collectives.fabric_topology import TopologyError, TopologySpec

CONGEST_PACKETS = 300     # at 1.5x the port's rate a third stays queued: ~100, beyond the 64-packet default depth


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_topology_arguments(p)
    return p.parse_args(list(argv))


@pytest.mark.unit
def test_pfc_flags_become_switch_commands() -> None:
    assert pfc_from_args(_args()) == PfcSettings()
    pfc = pfc_from_args(_args("--pfc", "on", "--pfc-xoff", "9000", "--pfc-xon", "3000", "--pfc-headroom", "6000",
                              "--pfc-watchdog", "20"))
    assert pfc == PfcSettings(True, 9000, 3000, 6000, 20.0)
    cmds = pfc.commands([1, 2])
    assert cmds == ["set_queue_depth 470", "pfc_enable 1 1", "pfc_thresholds 1 9000 3000 6000", "pfc_watchdog 1 20",
                    "pfc_enable 2 1", "pfc_thresholds 2 9000 3000 6000", "pfc_watchdog 2 20"]
    assert PfcSettings().commands([1]) == []
    for bad in (["--pfc", "yes"], ["--pfc", "on", "--pfc-xon", "9000", "--pfc-xoff", "100"],
                ["--pfc-xoff", "9000"], ["--pfc", "on", "--backend", "bmv2"]):
        with pytest.raises(FabricCliError) as exc:
            pfc_from_args(_args(*bad))
        assert exc.value.is_user_error and "\n" not in str(exc.value)
    with pytest.raises(SystemExit):                 # out of its range: argparse's own error, exit 2
        _args("--pfc", "on", "--pfc-headroom", "-1")


@pytest.mark.unit
def test_pfc_priority_reaches_the_spec_the_switches_and_the_ranks_env() -> None:
    spec = spec_from_args(_args("--pfc", "on"))
    assert spec.pfc_priority == 3                                     # the lossless RoCE class by default
    assert spec_from_args(_args("--pfc", "on", "--pfc-priority", "5")).pfc_priority == 5
    assert spec_from_args(_args()).pfc_priority is None
    for bad in (["--pfc-priority", "5"], ["--pfc", "on", "--pfc-priority", "6"], ["--pfc", "on", "--pfc-priority",
                                                                                  "9"]):
        with pytest.raises((FabricCliError, TopologyError)) as exc:
            spec_from_args(_args(*bad))
        assert exc.value.is_user_error and "--pfc-priority" in str(exc.value) and "\n" not in str(exc.value)
    fab = Fabric(spec, pfc=pfc_from_args(_args("--pfc", "on")))     # not brought up: its commands only
    program = fab.switch_program("p0l0")
    assert {"pfc_dscp_map 26 3", "pfc_dscp_map 48 6", "pfc_dscp_map 23 int", "pfc_enable 1 1 3"} <= set(program)
    assert Fabric(TopologySpec(pfc_priority=3)).pfc.enabled
    with pytest.raises(FabricError):
        Fabric(TopologySpec(pfc_priority=3), pfc=PfcSettings())
    assert fabric_env(spec, 1.0, base={})["STARPULSE_NIC_PFC"] == "3"
    assert fabric_env(spec, 1.0, base={"STARPULSE_NIC_PFC": "3,64,8"})["STARPULSE_NIC_PFC"] == "3,64,8"
    assert fabric_env(spec, 1.0, base={"STARPULSE_NIC_PFC": "0"})["STARPULSE_NIC_PFC"] == "3"
    assert "STARPULSE_NIC_PFC" not in fabric_env(spec_from_args(_args()), 1.0, base={})


def _congested(pfc: PfcSettings, pcap_dir: Path | None) -> tuple[Fabric, dict, str, str]:
    fab = Fabric(TopologySpec(servers=2, gpus_per_server=1, spines=0), pfc=pfc,
                 pcap_dir=str(pcap_dir) if pcap_dir else None)
    with fab:
        src = fab.topo.nics[0]
        congest(fab, overload=1.5, packets=CONGEST_PACKETS)
        status = fab.status()
    return fab, status, f"{src.server}:{src.leaf}", fab.topo.ports_of(src.leaf)[src.leaf_port]


@pytest.mark.emu
def test_congested_leaf_pauses_its_sender_visible_in_status_and_pcaps(tmp_path: Path, capsys) -> None:
    fab, status, link_name, iface = _congested(PfcSettings(True, 6000, 3000, 200_000), tmp_path)
    link = next(lk for lk in status["links"] if lk["link"] == link_name)
    to_host = link["b_to_a"]                                  # the leaf port's own counters, sending to the host
    assert to_host["pfc_pauses_sent"] >= 1 and to_host["pfc_xoff_events"] >= 1
    assert status["pfc"]["totals"]["pfc_pauses_sent"] >= to_host["pfc_pauses_sent"]
    _print_pfc(status)
    out = capsys.readouterr().out
    assert out.startswith("PFC on (XOFF 6000 B") and link_name in out
    rows = subprocess.run(["tshark", "-r", str(tmp_path / f"{iface}_out.pcap"), "-Y", "macc", "-T", "fields",
                           "-e", "macc.opcode", "-e", "macc.cbfc.enbv", "-e", "macc.cbfc.pause_time.c0"],
                          capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    assert rows[0].split("\t") == ["0x0101", "0x0001", "65535"]


@pytest.mark.emu
def test_same_congestion_without_pfc_drops_and_sends_no_pause() -> None:
    fab, status, link_name, _iface = _congested(PfcSettings(), None)
    assert status["totals"]["queue_drop_pkts"] > 0 and "pfc" not in status
