"""Collectives stay exact through faults on a real fabric: 2 % loss on one host link and a flapping uplink."""

from __future__ import annotations

import os
import textwrap
import threading

import pytest

from emu.fabric import Fabric
from emu.faults import FaultInjector
from emu.launch import launch
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu

RANK_SCRIPT = textwrap.dedent("""
    import numpy as np
    from sw.collectives import init_from_env

    comm = init_from_env()
    n, me = comm.world_size, comm.rank
    base = np.arange(64 * 1024, dtype=np.int64)
    want = base * n + n * (n - 1) // 2
    rounds = 0
    for _ in range(4):
        for algo in comm.tuner.available("allreduce"):
            x = base + me
            comm.allreduce(x, algo=algo)
            assert np.array_equal(x, want), f"allreduce {algo} wrong on rank {me}"
            rounds += 1
    print(f"rank {me}: {rounds} exact allreduces", flush=True)
""")


def _run_ranks(fabric: Fabric, tmp_path, lines: list[str]):
    script = tmp_path / "allreduce_loop.py"
    script.write_text(RANK_SCRIPT)
    pids = fabric.net.node_pids()
    return launch(fabric.topo, {s: pids[s] for s in fabric.topo.servers}, ["python", str(script)],
                  logdir=tmp_path, timeout_s=240, echo=lines.append, env={**os.environ, "STARPULSE_TIMEOUT": "120"})


def test_allreduce_exact_with_two_percent_loss_and_a_flapping_link(tmp_path) -> None:
    fabric = Fabric(TopologySpec(servers=2, gpus_per_server=2, spines=2), wired_links=["s0:p0l0"])
    try:
        fabric.up()
        faults = FaultInjector(fabric, str(tmp_path / "faults.jsonl"))
        faults.loss("s0:p0l0", 2.0)
        stop = threading.Event()

        def flap() -> None:
            # an uplink of rail 1's leaf goes down and up while the ranks run: cross-rail traffic (the flat ring)
            # is rerouted over the other spine and back
            stop.wait(2.0)
            while not stop.is_set():
                faults.link_down("p0l1:sp0")
                stop.wait(0.5)
                faults.link_up("p0l1:sp0")
                stop.wait(1.0)

        flapper = threading.Thread(target=flap, daemon=True)
        lines: list[str] = []
        flapper.start()
        try:
            result = _run_ranks(fabric, tmp_path, lines)
        finally:
            stop.set()
            flapper.join(timeout=10)
        assert result.exit_code == 0, "\n".join(lines[-40:])
        assert sum("exact allreduces" in line for line in lines) == 4, "\n".join(lines[-40:])
        log = (tmp_path / "faults.jsonl").read_text().splitlines()
        assert any('"link_down"' in e for e in log) and any('"loss"' in e for e in log)
        status = fabric.status()
        assert status is not None
    finally:
        fabric.down()
