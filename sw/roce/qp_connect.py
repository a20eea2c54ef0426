"""Connection set-up of an RC QP pair: each side publishes its QP number, PSN and addresses (plus any memory
region the peer needs) in a rendezvous store, reads the peer's, and walks RESET -> INIT -> RTR -> RTS.
"""

from __future__ import annotations

import random
from typing import Any

from sw.roce.flow import DSCP_ROCE_DEFAULT
from sw.roce.gid import gid_of
from sw.roce.qp import QpState, QueuePair
from sw.roce.store import FileStore
from sw.roce.verbs import MemoryRegion


def qp_info(qp: QueuePair, psn: int, mr: MemoryRegion | None = None) -> dict[str, Any]:
    """What the peer needs to reach ``qp`` (and to RDMA into ``mr``)."""
    info: dict[str, Any] = {
        "qp_num": qp.qp_num,
        "psn": psn,
        "mac": qp.nic.mac,
        "ip": qp.nic.ip,
        "gid": gid_of(qp.nic.ip),  # RoCEv2 GID: the IPv6 address, or IPv4-mapped for an IPv4 NIC
    }
    if mr is not None:
        info.update(addr=mr.addr, rkey=mr.rkey, length=mr.length)
    return info


def connect(qp: QueuePair, local_psn: int, remote: dict[str, Any], *, path_mtu: int,
            traffic_class: int = DSCP_ROCE_DEFAULT << 2, **attrs: int) -> None:
    """Bring ``qp`` from RESET to RTS towards the peer described by ``remote`` (a ``qp_info`` dict); its packets
    carry ``traffic_class`` (DSCP << 2, the PFC class switches map to a priority)."""
    qp.modify(QpState.INIT)
    qp.modify(
        QpState.RTR,
        dest_qp_num=int(remote["qp_num"]),
        dest_mac=str(remote["mac"]),
        dest_ip=str(remote.get("gid", remote["ip"])),
        path_mtu=path_mtu,
        rq_psn=int(remote["psn"]),
        traffic_class=traffic_class,
    )
    qp.modify(QpState.RTS, sq_psn=local_psn, **attrs)


def exchange(store: FileStore, me: str, peer: str, info: dict[str, Any], timeout_ns: int) -> dict[str, Any]:
    """Publish ``info`` under ``me`` and return what ``peer`` published (waiting up to ``timeout_ns``)."""
    store.set(me, info)
    return store.wait(peer, timeout_ns)


def random_psn(rng: random.Random | None = None) -> int:
    """A random initial PSN, as verbs applications pick them."""
    return (rng or random.Random()).randrange(1 << 24)
