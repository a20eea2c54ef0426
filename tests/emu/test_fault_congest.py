"""The ``congest`` fault on a running PFC fabric (three servers, one leaf): another tenant's RoCE stream
(``emu.tenant``: an RC QP from the next NIC of the leaf, RDMA WRITEs paced at the fault's rate in the lossless
class) into the target NIC, so the leaf's port toward it sends at about that rate, in the lossless priority's queue;
its receiver beside the target uses QP numbers of its own; ``uncongest`` stops both processes (sender first) and
untracks them, and a stream left running is stopped by the fabric's teardown."""

from __future__ import annotations

import pytest

from emu.fabric import Fabric
from emu.status import parse_port_stats, parse_table
from sw.collectives.fabric_topology import ETH_HEADER_BYTES

pytestmark = pytest.mark.emu

RATE_BPS = 50_000_000
DILATION = 20.0


def _tx_bytes(fab: Fabric, leaf: str, port: int) -> int:
    return parse_port_stats(fab.switch_cli(leaf, "port_stats"))[port]["tx_bytes"]


def test_congest_paces_a_tenant_rdma_stream_into_the_nic_and_uncongest_stops_it() -> None:
    with Fabric(servers=3, gpus_per_server=1, spines=0, pfc="on", time_dilation=DILATION) as fab:
        nic = fab.topo.nics_of("s1")[0]
        event = fab.fault("congest", nic.ifname, str(RATE_BPS))      # from s2's NIC, the next on the leaf
        assert event.ok and event.changed == ["s2", nic.leaf, "s1"]
        procs, rate = fab.faults.congested[nic.ifname]
        assert rate == RATE_BPS and all(p.poll() is None and p in fab.helper_procs for p in procs)
        t0, b0 = fab.clock.now_ns(), _tx_bytes(fab, nic.leaf, nic.leaf_port)
        fab.clock.sleep_ns(200_000_000)                              # 0.2 s network, 4 s wall
        t1, b1 = fab.clock.now_ns(), _tx_bytes(fab, nic.leaf, nic.leaf_port)
        sent_bps = (b1 - b0) * 8e9 / (t1 - t0)
        assert 0.3 * RATE_BPS <= sent_bps <= 1.15 * RATE_BPS, sent_bps    # paced at the fault's rate, not beyond
        queues = {int(r["prio"]): r for r in parse_table(fab.switch_cli(nic.leaf, f"queue_stats {nic.leaf_port}"))}
        lossless = int(queues[fab.spec.pfc_priority]["deq_pkts"])
        largest_frame = fab.spec.mtu + ETH_HEADER_BYTES               # an MTU-sized IP packet and its Ethernet header
        assert lossless * largest_frame >= 0.5 * (b1 - b0), queues    # the stream leaves by the lossless queue
        assert int(queues[0]["deq_pkts"]) < lossless / 10, queues
        fab.fault("uncongest", nic.ifname)
        assert all(p.poll() is not None and p not in fab.helper_procs for p in procs)
        assert fab.faults.active()["congested_nics"] == {}
        fab.fault("congest", nic.ifname, "20M")                      # left running: the teardown stops it
        left, _ = fab.faults.congested[nic.ifname]
    assert all(p.poll() is not None for p in left)
