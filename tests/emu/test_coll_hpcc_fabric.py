"""The collectives' RoCE transport with HPCC (issue 20) on a live P4 fabric (2 servers x 1 GPU x 1 spine): the
launcher hands the ranks ``roce_cc`` and the fabric's base RTT, the leaves stamp INT on the ranks' RoCE data, the
receivers echo it in ACKs and every sender's QP feeds it to HPCC; the allreduce's results are exact, 0 drops."""

from __future__ import annotations

import json
import textwrap

import pytest

from emu.fabric import Fabric
from sw.clock import ENV_DILATION, Clock
from sw.collectives.fabric_topology import TopologySpec

pytestmark = pytest.mark.emu

DILATION = 20.0
ELEMS = 1 << 18   # 1 MiB of int32 per rank

RANK_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    from sw.collectives import init_from_env

    out, elems = sys.argv[1], int(sys.argv[2])
    comm = init_from_env()
    data = [np.random.default_rng(7 + r).integers(-2**20, 2**20, elems, dtype=np.int32)
            for r in range(comm.world_size)]
    got = comm.allreduce(data[comm.rank].copy())
    exact = bool(np.array_equal(got, np.sum(data, axis=0, dtype=np.int32)))
    roce = next(t for t in comm.net.transports if t.name == "roce")
    report = {"exact": exact, "cc": roce.nic.cc_name, "base_rtt_ns": roce.nic.base_rtt_ns,
              "env_cc": os.environ.get("STARPULSE_ROCE_CC"), "env_rtt": os.environ.get("STARPULSE_ROCE_BASE_RTT"),
              "cc_counters": roce.cc_counters(), "int_frames": roce.nic.counters.int_frames,
              "retransmitted": roce.nic.qp_counters()["retransmitted_packets"]}
    comm.close()
    with open(f"{out}/rank{comm.rank}.json", "w") as fh:
        json.dump(report, fh)
""")


def test_allreduce_with_hpcc_through_the_fabric_consumes_int_echoes(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_DILATION, repr(DILATION))        # the switches run at the ranks' dilation
    monkeypatch.delenv("STARPULSE_ROCE_CC", raising=False)
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    spec = TopologySpec(servers=2, gpus_per_server=1, spines=1)
    lines: list[str] = []
    with Fabric(spec, clock=Clock(DILATION)) as fab:
        status = fab.status()
        assert status["int_sink"] == "host"                      # the receivers keep INT to echo it
        before = status["totals"]
        result = fab.launch(["python", str(script), str(tmp_path), str(ELEMS)], logdir=str(tmp_path / "logs"),
                            timeout_s=120, echo=lines.append, roce_cc="hpcc", net="roce")
        after = fab.status()["totals"]
    assert result.exit_code == 0, "\n".join(lines)
    assert after["drops"] - before["drops"] == 0
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for rank, rep in enumerate(reports):
        assert rep["exact"], f"rank {rank}: allreduce differs"
        assert rep["cc"] == "hpcc" and rep["env_cc"] == "hpcc"
        assert int(rep["env_rtt"]) == spec.base_rtt_ns()       # the fabric's round trip, from fabric_env
        assert rep["base_rtt_ns"] > spec.base_rtt_ns()          # HPCC's T: the fabric's plus the stack's
        assert rep["int_frames"] > 0, f"rank {rank}: no INT arrived"
        (peer_counters,) = rep["cc_counters"].values()
        assert peer_counters["int_echoes"] > 0, f"rank {rank}: no ACK echoed INT"
        assert peer_counters["hpcc_updates"] > 0, f"rank {rank}: HPCC never updated its window"
    print(f"\nHPCC allreduce 1 MiB x 2 ranks at dilation {DILATION:g}: "
          + "; ".join(f"rank {r}: {rep['cc_counters']} retransmitted {rep['retransmitted']}"
                      for r, rep in enumerate(reports)))
