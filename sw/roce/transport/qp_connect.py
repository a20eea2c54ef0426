"""Connection set-up of an RC QP pair: each side publishes its QP number, PSN and addresses (plus any memory
region the peer needs) in a rendezvous store, reads the peer's, and walks RESET -> INIT -> RTR -> RTS.

The RDMA READ / atomic limits are negotiated like rdma_cm's initiator_depth / responder_resources: each side
publishes what it wants (``max_rd_atomic`` outstanding as requester, ``max_dest_rd_atomic`` served as responder);
its initiator depth becomes min(own max_rd_atomic, peer's max_dest_rd_atomic); its responder resources stay
what it asked for (never fewer than the peer may use).  A peer that publishes no ``max_dest_rd_atomic`` is
taken to have the device maximum.
"""

from __future__ import annotations

import random
from typing import Any

from sw.roce.transport.qp import QpState, QueuePair
from sw.roce.transport.verbs import MAX_QP_INIT_RD_ATOM, MAX_QP_RD_ATOM, MemoryRegion, VerbsError, query_device
from sw.roce.wire.flow import DSCP_ROCE_DEFAULT
from sw.roce.wire.gid import gid_of
from sw.units.file_store import FileStore


def qp_info(qp: QueuePair, psn: int, mr: MemoryRegion | None = None, *, max_rd_atomic: int = MAX_QP_INIT_RD_ATOM,
            max_dest_rd_atomic: int = MAX_QP_RD_ATOM) -> dict[str, Any]:
    """What the peer needs to reach ``qp`` (and to RDMA into ``mr``); pass ``connect`` the same rd_atomic values."""
    _check_rd_atomic(max_rd_atomic, max_dest_rd_atomic)
    info: dict[str, Any] = {
        "qp_num": qp.qp_num,
        "psn": psn,
        "mac": qp.nic.mac,
        "ip": qp.nic.ip,
        "gid": gid_of(qp.nic.ip),  # RoCEv2 GID: the IPv6 address, or IPv4-mapped for an IPv4 NIC
        "max_rd_atomic": max_rd_atomic,
        "max_dest_rd_atomic": max_dest_rd_atomic,
    }
    if mr is not None:
        info.update(addr=mr.addr, rkey=mr.rkey, length=mr.length)
    return info


def _check_rd_atomic(max_rd_atomic: Any, max_dest_rd_atomic: Any) -> None:
    dev = query_device()
    for name, value, cap_name in (
        ("max_rd_atomic", max_rd_atomic, "max_qp_init_rd_atom"),
        ("max_dest_rd_atomic", max_dest_rd_atomic, "max_qp_rd_atom"),
    ):
        cap = getattr(dev, cap_name)
        if not isinstance(value, int) or not 0 <= value <= cap:
            raise VerbsError(f"connect {name}={value!r}: must be 0..{cap} (device {cap_name})")


def negotiate_rd_atomic(max_rd_atomic: int, remote: dict[str, Any]) -> int:
    """This side's initiator depth: its own max_rd_atomic capped by the peer's published responder resources."""
    peer_dest = remote.get("max_dest_rd_atomic", query_device().max_qp_rd_atom)
    if not isinstance(peer_dest, int) or peer_dest < 0:
        raise VerbsError(f"connect: peer published max_dest_rd_atomic={peer_dest!r}: must be an integer >= 0")
    return min(max_rd_atomic, peer_dest)


def connect(qp: QueuePair, local_psn: int, remote: dict[str, Any], *, path_mtu: int,
            traffic_class: int = DSCP_ROCE_DEFAULT << 2, max_rd_atomic: int = MAX_QP_INIT_RD_ATOM,
            max_dest_rd_atomic: int = MAX_QP_RD_ATOM, **attrs: int) -> None:
    """Bring ``qp`` from RESET to RTS towards the peer described by ``remote`` (a ``qp_info`` dict); its packets
    carry ``traffic_class`` (DSCP << 2, the PFC class switches map to a priority).  ``max_rd_atomic`` /
    ``max_dest_rd_atomic`` are what this side asked for in its ``qp_info``; the QP gets the negotiated values."""
    _check_rd_atomic(max_rd_atomic, max_dest_rd_atomic)
    init_depth = negotiate_rd_atomic(max_rd_atomic, remote)
    qp.modify(QpState.INIT)
    qp.modify(
        QpState.RTR,
        dest_qp_num=int(remote["qp_num"]),
        dest_mac=str(remote["mac"]),
        dest_ip=str(remote.get("gid", remote["ip"])),
        path_mtu=path_mtu,
        rq_psn=int(remote["psn"]),
        traffic_class=traffic_class,
        max_dest_rd_atomic=max_dest_rd_atomic,
    )
    qp.modify(QpState.RTS, sq_psn=local_psn, max_rd_atomic=init_depth, **attrs)


def exchange(store: FileStore, me: str, peer: str, info: dict[str, Any], timeout_ns: int) -> dict[str, Any]:
    """Publish ``info`` under ``me`` and return what ``peer`` published (waiting up to ``timeout_ns``)."""
    store.set(me, info)
    return store.wait(peer, timeout_ns)


def random_psn(rng: random.Random | None = None) -> int:
    """A random initial PSN, as verbs applications pick them."""
    return (rng or random.Random()).randrange(1 << 24)
