"""One lossless RoCE class end to end, as users run it: ``starpulse fabric up --pfc on`` (default
``--pfc-priority 3``), ``starpulse run`` ranks that incast over the collectives' RoCE transport (3 -> 1 through
one leaf port, no congestion control), ``starpulse fabric status --json``, ``fabric down``.

The ranks learn the class from the fabric's state file ($STARPULSE_NIC_PFC=3), send RoCE with DSCP 26, the leaf
maps it to priority 3 and pauses the senders on that priority only; their wires hold while paused.  Checked:
nothing dropped, pauses counted under priority 3 (and no other) in the status JSON and by the ranks' NICs, the
PFC frames in the leaf's pcaps decoded by tshark with class-enable bit 3, the data frames carrying DSCP 26
(ACKs that echo INT for HPCC carry fabric.p4's INT DSCP 23, classified by the original DSCP in their shim).
The senders' in-flight budget (<= 41 KB) stays below XOFF + headroom, so zero drops is the PFC contract, not
luck; the pauses are what keeps the per-port buffer near XOFF."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from sw.collectives.fabric_topology import DEFAULT_FABRIC_MTU
from sw.roce.softnic.port import path_mtu_for

pytestmark = [pytest.mark.emu, pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")]

REPO = Path(__file__).resolve().parents[2]
UP_TIMEOUT_S = 90
SENDERS = 3
MSG_BYTES = 384 * 1024
PRIO = 3
FABRIC = ["--servers", str(SENDERS + 1), "--gpus-per-server", "1", "--spines", "0", "--link-rate", "20M",
          "--pfc", "on", "--pfc-xoff", "8000", "--pfc-xon", "4000", "--pfc-headroom", "64000"]

RANK_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from sw.collectives import init_from_env

    out, nbytes = sys.argv[1], int(sys.argv[2])
    comm = init_from_env()
    rank, n = comm.rank, comm.world_size
    if rank == 0:                                    # the incast: every other rank sends to rank 0 at once
        bufs = {peer: np.zeros(nbytes // 4, np.int32) for peer in range(1, n)}
        works = [comm.recv(bufs[peer], peer, async_op=True) for peer in range(1, n)]
        for w in works:
            w.wait()
        ok = all(bool(np.all(b == peer)) for peer, b in bufs.items())
    else:
        comm.send(np.full(nbytes // 4, rank, np.int32), 0)
        ok = True
    comm.barrier()
    roce = next(t for t in comm.net.transports if t.name == "roce")
    pfc = roce.nic.pfc
    with open(f"{out}/rank{rank}.json", "w") as fh:
        json.dump({"ok": ok, "env": os.environ.get("STARPULSE_NIC_PFC"), "priority": pfc and pfc.priority,
                   "pfc": pfc and pfc.as_dict(roce.clock.now_ns())}, fh)
    comm.close()
""")


def _cli(module: str, *argv: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=timeout)


def _tshark(pcap: Path, display_filter: str, *fields: str) -> list[list[str]]:
    args = [a for f in fields for a in ("-e", f)]
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", display_filter, "-T", "fields", *args],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line]


@pytest.fixture(scope="module")
def incast(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Fabric up (its own process), the ranks' incast through `starpulse run`, status --json, fabric down."""
    tmp = tmp_path_factory.mktemp("pfcclass")
    pcaps, outdir = tmp / "pcap", tmp / "out"
    outdir.mkdir()
    script = tmp / "incast.py"
    script.write_text(RANK_SCRIPT)
    name = f"pfc{os.getpid()}"
    env = dict(os.environ, STARPULSE_STATE_DIR=str(tmp / "state"), STARPULSE_ROCE_CC="none", STARPULSE_TIMEOUT="60")
    env.pop("STARPULSE_NIC_PFC", None)
    up = subprocess.Popen([sys.executable, "-m", "emu.cli", "up", *FABRIC, "--pcap", str(pcaps), "--name", name],
                          cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        state = tmp / "state" / f"fabric-{name}" / "state.json"
        deadline = time.monotonic() + UP_TIMEOUT_S
        while not state.exists():
            assert up.poll() is None, up.stderr.read() if up.stderr else ""
            assert time.monotonic() < deadline, f"no state file after {UP_TIMEOUT_S} s"
            time.sleep(0.1)
        recorded = json.loads(state.read_text())
        run = _cli("emu.run_cli", "--name", name, "--quiet", "--timeout", "150", "--",
                   "python", str(script), str(outdir), str(MSG_BYTES), env=env, timeout=200)
        status = _cli("emu.cli", "status", "--json", "--name", name, env=env, timeout=60)
        text = _cli("emu.cli", "status", "--name", name, env=env, timeout=60)
        down = _cli("emu.cli", "down", "--name", name, env=env, timeout=120)
        assert down.returncode == 0, down.stderr
        assert up.wait(timeout=60) == 0
    finally:
        if up.poll() is None:
            up.terminate()
            up.wait(timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert status.returncode == 0, status.stderr
    ranks = {r: json.loads((outdir / f"rank{r}.json").read_text()) for r in range(SENDERS + 1)}
    return {"state": recorded, "status": json.loads(status.stdout), "text": text.stdout, "ranks": ranks,
            "pcaps": pcaps}


def test_the_state_file_and_the_ranks_agree_on_the_lossless_class(incast: dict) -> None:
    assert incast["state"]["topology"]["pfc_priority"] == PRIO
    assert incast["state"]["pfc"] == {"enabled": True, "priority": PRIO}
    for r in incast["ranks"].values():
        assert r["ok"] and r["env"] == str(PRIO) and r["priority"] == PRIO


def test_incast_is_lossless_and_pauses_only_the_lossless_priority(incast: dict) -> None:
    status, ranks = incast["status"], incast["ranks"]
    pfc = status["pfc"]
    assert pfc["priority"] == PRIO and pfc["lossless_priorities"] == [PRIO]
    assert pfc["dscp_map"] == {"26": PRIO, "48": 6, "23": "int"}
    assert status["totals"]["drops"] == 0 and status["totals"]["queue_drop_pkts"] == 0
    assert pfc["totals"]["pfc_headroom_drop_pkts"] == 0
    by_prio = pfc["totals_by_priority"]
    assert by_prio[str(PRIO)]["pfc_pauses_sent"] > 0 and by_prio[str(PRIO)]["pfc_xoff_events"] > 0
    assert all(c["pfc_pauses_sent"] == 0 for p, c in by_prio.items() if p != str(PRIO))
    assert pfc["totals"]["pfc_pauses_sent"] == by_prio[str(PRIO)]["pfc_pauses_sent"]
    paused_links = {lk["link"]: lk["b_to_a"]["pfc_priorities"] for lk in status["links"]
                    if lk["b_to_a"].get("pfc_pauses_sent")}
    assert paused_links and set(paused_links) <= {f"s{i}:p0l0" for i in range(1, SENDERS + 1)}
    assert all(set(per_prio) == {str(PRIO)} for per_prio in paused_links.values())
    senders_rx = [ranks[r]["pfc"]["pauses_rx"] for r in range(1, SENDERS + 1)]
    assert sum(senders_rx) > 0 and any(ranks[r]["pfc"]["paused_ns"] > 0 for r in range(1, SENDERS + 1))
    assert f"lossless priority {PRIO}" in incast["text"]
    print(json.dumps({"pauses_sent_by_priority": {p: c["pfc_pauses_sent"] for p, c in by_prio.items()},
                      "xoff_events": by_prio[str(PRIO)]["pfc_xoff_events"], "paused_links": paused_links,
                      "drops": status["totals"]["drops"], "senders_pauses_rx": senders_rx,
                      "senders_paused_ms": [ranks[r]["pfc"]["paused_ns"] / 1e6 for r in range(1, SENDERS + 1)]}))


def test_pcaps_show_priority_3_pauses_and_dscp_26_data(incast: dict) -> None:
    pcaps: Path = incast["pcaps"]
    pauses, data = [], []
    for port in range(2, SENDERS + 2):                  # leaf ports facing the senders s1..s3
        pauses += _tshark(pcaps / f"p0l0-eth{port}_out.pcap", "macc", "macc.opcode", "macc.cbfc.enbv",
                          f"macc.cbfc.pause_time.c{PRIO}")
        data += _tshark(pcaps / f"p0l0-eth{port}_in.pcap", "udp.dstport == 4791 && infiniband.bth.opcode < 16",
                        "ip.dsfield.dscp")               # requests (SENDs, RDMA WRITEs): not INT-echoing ACKs
    assert pauses and all(p[:2] == ["0x0101", f"0x{1 << PRIO:04x}"] for p in pauses), pauses[:5]
    assert ["0x0101", f"0x{1 << PRIO:04x}", "65535"] in pauses         # XOFF (and XON with quanta 0)
    assert {p[2] for p in pauses} <= {"65535", "0"}
    frames_per_msg = MSG_BYTES // path_mtu_for(DEFAULT_FABRIC_MTU)        # the fabric's default RoCE path MTU
    assert len(data) >= SENDERS * frames_per_msg and {d[0] for d in data} == {"26"}
    cnps = _tshark(pcaps / "p0l0-eth1_in.pcap", "udp.dstport == 4791 && ip.dsfield.dscp == 48", "frame.number")
    print(json.dumps({"pfc_frames": len(pauses), "roce_frames_dscp26": len(data), "cnps_dscp48": len(cnps)}))
