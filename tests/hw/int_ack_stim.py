"""INT-echo ACK stimulus for the NIC top level's HPCC mode: frames from sw.roce's builders, read as the host reads them.

``IntPath`` is one QP's forward path in the units a fabric.p4 switch writes (microsecond timestamps, a 32-bit tx
byte counter that wraps, queue occupancy in packets); ``ack_frame`` builds the responder's ACK with
``sw.roce.FlowTemplates`` and echoes the hops into it with ``sw.roce.wire.int_md.insert_int``; ``host_hops`` is the
host stack's path from such a frame to HPCC input (``sw.roce.softnic.nic`` strip + decode, ``QpPacer.int_hops``).
"""

from __future__ import annotations

import random

from sw.cc import IntHop
from sw.roce import Flow, FlowTemplates, Opcode, decode
from sw.roce.softnic.qp_pacer import QpPacer
from sw.roce.wire.decode import RocePacket
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.int_md import IntHopRecord, carries_int, insert_int, strip_int

BITS_NS_PER_KBPS = 8_000_000
SYNDROME_ACK = 0x1F  # ACK with credit count 31 (no end-to-end credit), as sw.roce's responder sends


def flow(qp: int) -> Flow:
    """The flow whose ACKs the NIC receives for ``qp`` (the RTL keeps the destination QPN's low bits)."""
    return Flow(src_mac="02:00:00:00:00:02", dst_mac="02:00:00:00:00:01", src_ip="10.0.0.2", dst_ip="10.0.0.1",
                src_qpn=0x100 + qp, dst_qpn=0x200 + qp)


def ack_frame(qp: int, psn: int, records: list[IntHopRecord] | None, *, echo: bool = True,
              syndrome: int = SYNDROME_ACK, msn: int = 0) -> bytes:
    """An RC ACK for ``qp`` acknowledging ``psn``, with ``records`` echoed as INT (None: a plain ACK)."""
    plain = FlowTemplates(flow(qp))[Opcode.ACKNOWLEDGE].build(psn, b"", ext=HeaderFields(syndrome=syndrome, msn=msn))
    return plain if records is None else insert_int(plain, records, echo=echo)


def host_hops(frame: bytes, pacer: QpPacer, qlen_unit_bytes: int) -> tuple[RocePacket, tuple[IntHop, ...]]:
    """The decoded ACK and the HPCC hops the host stack takes from it (empty unless INT echoed to the sender)."""
    records = None
    if carries_int(frame):
        frame, records = strip_int(frame)
    pkt = decode(frame)
    if not records or not records.echoed:
        return pkt, ()
    return pkt, pacer.int_hops(records, qlen_unit_bytes)


class IntPath:
    """One QP's INT path: per-hop counters that move with a load regime (1/4 .. 2.5 x the link)."""

    def __init__(self, rng: random.Random, n_hops: int, link_kbps: int, qlen_unit_bytes: int, bdp_bytes: int) -> None:
        self.rng, self.link_kbps, self.unit, self.bdp = rng, link_kbps, qlen_unit_bytes, bdp_bytes
        self.ts_us = [rng.randrange(1 << 40) for _ in range(n_hops)]
        self.tx = [(1 << 32) - rng.randrange(1, 1 << 16) for _ in range(n_hops)]  # wraps within the run
        self.nodes = [rng.randrange(1, 64) for _ in range(n_hops)]
        self.level_64, self.left = 64, 0

    @property
    def n_hops(self) -> int:
        return len(self.ts_us)

    def next_records(self) -> list[IntHopRecord]:
        rng = self.rng
        if self.left == 0:
            self.level_64, self.left = rng.choice((16, 40, 56, 60, 64, 72, 96, 160)), rng.randrange(3, 12)
        self.left -= 1
        gap_us = 0 if rng.random() < 0.04 else rng.randrange(1, 7)
        records = []
        for h in range(self.n_hops):
            dts = gap_us
            if rng.random() < 0.03:
                dts = -rng.randrange(1, 3)  # a stale record: the timestamp went backwards
            self.ts_us[h] = (self.ts_us[h] + dts) % (1 << 64)
            load_64 = self.level_64 * rng.randrange(48, 65) // 64
            self.tx[h] = (self.tx[h] + self.link_kbps * 1000 * max(dts, 0) * load_64 // (64 * BITS_NS_PER_KBPS)) \
                % (1 << 32)
            over = load_64 > 64
            occupancy = rng.randrange(0, 2 * self.bdp // self.unit + 2) if over else rng.randrange(0, 2)
            records.append(IntHopRecord(node_id=self.nodes[h], ingress_port=1 + h, egress_port=2 + h,
                                        hop_latency=rng.randrange(0, 5000), queue_id=0, queue_occupancy=occupancy,
                                        egress_timestamp=self.ts_us[h], egress_tx_bytes=self.tx[h]))
        return records
