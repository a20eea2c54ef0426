"""``starpulse bench`` reports what the busiest NIC carried (``nic_bps``): all of busbw for a flat ring, a third
of it for the hierarchical allreduce on 2 servers x 2 GPUs (the rest stays inside the servers)."""

from __future__ import annotations

import json

import pytest

from sw.apps import coll_bench

pytestmark = pytest.mark.unit


def _bench(tmp_path, capfd, algo: str) -> tuple[dict, str]:
    out_json = tmp_path / f"{algo}.json"
    code = coll_bench.main(["allreduce", "-A", algo, "-b", "64K", "-e", "64K", "--local", "--servers", "2", "--gpus",
                           "2", "-n", "2", "-w", "1", "-J", str(out_json)])
    text = capfd.readouterr().out
    assert code == 0, text
    return json.loads(out_json.read_text()), text


@pytest.mark.parametrize(("algo", "share"), [("ring", 1.0), ("hier", 1 / 3)])
def test_nic_payload_rate_is_the_inter_server_share_of_busbw(tmp_path, capfd, algo, share) -> None:
    report, text = _bench(tmp_path, capfd, algo)
    row = report["results"][-1]
    assert row["algo"] == algo
    # ring: ranks 1 and 3 send 2(n-1)/n of the buffer to the other server; hier: each rail's 2-server allreduce
    # moves half the buffer once: 1/2 of 1.5 x size
    assert row["nic_bps"] == pytest.approx(row["busbw_bps"] * share, rel=1e-6)
    assert row["nic_frac_line"] == pytest.approx(row["nic_bps"] / 100e6)
    assert report["max_size_nic_bps"] == row["nic_bps"]
    assert "# busiest NIC at 65536 B:" in text
    assert report["intra_rate_bps"] == 9 * 100e6          # the NVLink stand-in at 9 x the 100M link rate
    assert report["intra_measured_bps"] > 0 and "# shared memory (NVLink stand-in): 900 Mb/s configured" in text
