"""Two-host RDMA WRITE and READ on the verbs API: rank 0 writes a buffer into rank 1's memory, reads it back, and
both check the bytes.

    starpulse run --servers 2 --gpus-per-server 1 -- python examples/rdma_write_read.py
"""

import os

import numpy as np

from sw.roce import (
    ACCESS_ALL,
    FileStore,
    SendWr,
    WcOpcode,
    WcStatus,
    WorkCompletion,
    WrOpcode,
    connect,
    exchange,
    interface_of,
    next_hop_mac,
    open_device,
    path_mtu_for,
    qp_info,
    random_psn,
)

SIZE = 64 * 1024
TIMEOUT_NS = 30 * 10**9
PATTERN = (np.arange(SIZE) % 251).astype(np.uint8)

rank = int(os.environ["RANK"])                              # 0: requester, 1: responder
ifname = interface_of(os.environ["STARPULSE_NIC_ADDR"])     # this host's NIC, e.g. s0-eth0
nic = open_device(ifname, line_rate_bps=int(os.environ.get("STARPULSE_INTER_RATE", 100_000_000)))
store = FileStore(os.environ["STARPULSE_STORE"])            # rendezvous: a directory both hosts see

pd = nic.alloc_pd()
cq = nic.create_cq()
qp = nic.create_qp(pd, cq)                                  # an RC QP in RESET
buf = np.zeros(2 * SIZE, dtype=np.uint8)                    # [source | READ destination] on rank 0
mr = pd.reg_mr(buf, ACCESS_ALL)                             # local write, remote read and write

psn = random_psn()
mine = qp_info(qp, psn, mr) | {"path_mtu": path_mtu_for(nic.port.mtu)}   # QP number, PSN, GID, addr, rkey
peer = exchange(store, f"qp{rank}", f"qp{1 - rank}", mine, TIMEOUT_NS)
peer["mac"] = next_hop_mac(peer["ip"], nic.ip, ifname, peer["mac"])   # frames go to the gateway
connect(qp, psn, peer, path_mtu=min(mine["path_mtu"], peer["path_mtu"]))   # RESET -> INIT -> RTR -> RTS


def complete(wr: SendWr) -> WorkCompletion:
    """Post one work request and drive the NIC until its completion arrives."""
    qp.post_send(wr)
    if not nic.run_until(lambda: len(cq) > 0, TIMEOUT_NS):
        raise TimeoutError(f"no completion for {wr.opcode.name}")
    (wc,) = cq.poll(1)
    if wc.status != WcStatus.SUCCESS:
        raise RuntimeError(f"{wr.opcode.name} completed with {wc.status.name}")
    return wc


if rank == 0:
    buf[:SIZE] = PATTERN
    complete(SendWr(1, WrOpcode.RDMA_WRITE, mr.sge(0, SIZE), remote_addr=peer["addr"], rkey=peer["rkey"]))
    wc = complete(SendWr(2, WrOpcode.RDMA_READ, mr.sge(SIZE, SIZE), remote_addr=peer["addr"], rkey=peer["rkey"]))
    assert wc.opcode == WcOpcode.RDMA_READ and (buf[SIZE:] == PATTERN).all()
    store.set("done", True)
else:   # the responder posts nothing: its NIC serves the WRITE and READ while it progresses
    if not nic.run_until(lambda: store.get("done") is not None, TIMEOUT_NS):
        raise TimeoutError("rank 0 did not finish")
    assert (buf[:SIZE] == PATTERN).all()
print(f"rank {rank}: {SIZE} bytes verified, {nic.qp_counters()['tx_packets']} packets sent on {ifname}")
nic.close()
