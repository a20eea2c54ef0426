"""``emu.launch`` on a real fabric (2 servers x 2 GPUs x 1 spine): every rank runs the collectives self-check in
its server's namespace over the P4 switches; a failing rank stops the others and sets the exit code; nothing
outlives the job."""

from __future__ import annotations

import os
import sys

import pytest

from emu.fabric import Fabric
from emu.launch import LaunchError, launch, rank_plan
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu


@pytest.fixture(scope="module")
def fabric():
    fab = Fabric(TopologySpec(servers=2, gpus_per_server=2, spines=1))
    try:
        fab.up()
        yield fab
    finally:
        fab.down()


def _servers(fab: Fabric) -> dict[str, int]:
    pids = fab.net.node_pids()
    return {s: pids[s] for s in fab.topo.servers}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_every_rank_passes_the_self_check_over_the_fabric(fabric, tmp_path) -> None:
    lines: list[str] = []
    result = launch(fabric.topo, _servers(fabric), ["python", "-m", "sw.collectives"], logdir=tmp_path,
                    timeout_s=120, echo=lines.append, env={**os.environ, "STARPULSE_TIMEOUT": "60"})
    assert result.exit_code == 0, "\n".join(lines)
    for plan in rank_plan(fabric.topo):
        log = (tmp_path / f"rank{plan.rank}.log").read_text()
        assert f"rank {plan.rank}/4 server {plan.server_index} gpu {plan.local_rank}: ok;" in log, log
    # ranks of different servers really crossed the switches: the leaves forwarded their TCP segments
    tx = sum(p["tx_pkts"] for sw in fabric.status()["switches"].values() for p in sw["ports"].values())
    assert tx > 100


def test_env_contract_and_namespace(fabric, tmp_path) -> None:
    script = ("import os,subprocess;"
              "print(os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['LOCAL_RANK'],"
              " os.environ['LOCAL_WORLD_SIZE'], os.environ['STARPULSE_SERVER'], os.environ['STARPULSE_NIC_ADDR'],"
              " os.path.isdir(os.environ['STARPULSE_STORE']),"
              " os.environ['STARPULSE_NIC_ADDR'] in subprocess.run(['ip','-4','addr'],capture_output=True,"
              " text=True).stdout)")
    result = launch(fabric.topo, _servers(fabric), [sys.executable, "-c", script], logdir=tmp_path, timeout_s=60)
    assert result.exit_code == 0
    for plan in rank_plan(fabric.topo):
        words = (tmp_path / f"rank{plan.rank}.log").read_text().split()
        assert words == [str(plan.rank), "4", str(plan.local_rank), "2", str(plan.server_index), plan.nic_addr,
                         "True", "True"], words
    assert [p.nic_addr for p in rank_plan(fabric.topo)] == ["10.0.0.1", "10.0.1.1", "10.0.0.2", "10.0.1.2"]


def test_a_failing_rank_stops_the_others(fabric, tmp_path) -> None:
    script = ("import os,sys,time;print(os.getpid(),flush=True);r=int(os.environ['RANK']);"
              "sys.exit(3) if r==2 else time.sleep(300)")
    result = launch(fabric.topo, _servers(fabric), [sys.executable, "-c", script], logdir=tmp_path, timeout_s=120)
    assert result.exit_code == 3
    assert result.failed_ranks == [2]
    stopped = [r.rank for r in result.ranks if r.stopped_by_launcher]
    assert stopped == [0, 1, 3]
    for r in result.ranks:
        words = r.log_path.read_text().split()
        if not words:   # stopped (on a busy machine) before its script printed: the launcher reaped the process
            assert r.returncode in (128 + 15, 128 + 9), r
            continue
        pid = int(words[0])
        assert not _alive(pid), f"rank {r.rank} (pid {pid}) outlived the job"


def test_bad_command_is_a_user_error(fabric, tmp_path) -> None:
    with pytest.raises(LaunchError, match="no-such-program-xyz"):
        launch(fabric.topo, _servers(fabric), ["no-such-program-xyz"], logdir=tmp_path)
