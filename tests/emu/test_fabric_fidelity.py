"""The fabric's ``fidelity`` verdict (issue 16): every switch's ingress/TM lag and the link emulators' reach
``status()["fidelity"]`` with exactly the contracted keys; a switch starved of CPU (SIGSTOP while probes cross
it) turns it to ok: false with that switch named, one warning line, and exit 3 under --strict-fidelity."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from emu.cli import print_status
from emu.fabric import Fabric
from sw.clock import ENV_DILATION, Clock
from sw.clock.lag import (
    ENV_LINK_MTU,
    FIDELITY_KEYS,
    STRICT_FIDELITY_EXIT,
    fidelity_exit,
    mtu_serialization_ns,
    mtu_wire_bytes,
)
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu


DILATION = 20.0     # the other components keep up on a loaded machine; the 1 s stall is 50 ms of network time


def test_fidelity_in_status_and_a_stalled_switch_is_reported(capsys, monkeypatch) -> None:
    monkeypatch.setenv(ENV_DILATION, repr(DILATION))          # the switches and emulators run at it too
    monkeypatch.delenv(ENV_LINK_MTU, raising=False)
    fab = Fabric(TopologySpec(servers=2, gpus_per_server=1, spines=1, delay_ns=2_000, mtu=9000),  # wired: emu.wire
                 clock=Clock(DILATION))
    with fab:
        a, b = fab.topo.nics[0].ip, fab.topo.nics[1].ip
        assert all(r["ok"] for r in fab.probe([(a, b)]))
        status = fab.status()
        fid = status["fidelity"]
        assert tuple(fid) == FIDELITY_KEYS and isinstance(fid["ok"], bool)
        comps = fab.lag()
        assert {"p0l0 ingress", "p0l0 tm"} <= set(comps) and comps["p0l0 ingress"].events > 0
        assert any(name.startswith("wire ") for name in comps)          # the delay lines reported too
        fastest_bps = max(fab.link_rates_bps("p0l0").values())   # one frame of the fabric's MTU at its fastest link
        assert comps["p0l0 tm"].bound_ns == mtu_serialization_ns(fastest_bps, mtu_wire_bytes(9000))
        wire = next(s for name, s in comps.items() if name.startswith("wire "))
        assert wire.bound_ns == mtu_serialization_ns(10e9, mtu_wire_bytes(9000))    # an unshaped veth's 10 Gb/s

        leaf = fab.net.switches["p0l0"].proc
        assert leaf is not None
        leaf.send_signal(signal.SIGSTOP)          # the leaf starved for 1 s while a probe waits at it
        try:
            t = threading.Thread(target=fab.probe, args=([(a, b)],), kwargs={"retries": 1, "timeout_ms": 2000})
            t.start()
            time.sleep(1.0)        # the probe process starts (~0.3 s), its frame waits at the leaf
        finally:
            leaf.send_signal(signal.SIGCONT)
        t.join(timeout=30)
        status = fab.status()
        stalled = fab.lag()["p0l0 ingress"]
    assert ENV_LINK_MTU not in os.environ                            # the fabric's MTU left with the fabric
    assert not stalled.ok and stalled.max_ns >= 0.2e9 / DILATION      # a frame waited >= 0.2 s at the stopped leaf
    fid = status["fidelity"]
    assert fid["ok"] is False and fid["lag_max_ns"] >= stalled.max_ns and fid["late_share"] > 0.001
    capsys.readouterr()
    print_status("t", status)
    assert "fidelity: NOT ok" in capsys.readouterr().out
    assert fidelity_exit(fid, strict=True) == STRICT_FIDELITY_EXIT and fidelity_exit(fid, strict=False) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(fid["worst_component"] in line and line.startswith("warning: fidelity:")
                                 for line in err)
