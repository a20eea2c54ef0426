"""Packet-building throughput: Scapy layer by layer vs the fast template, plus the fast decoder.

Benchmarks are not data path: wall time comes from ``time.perf_counter``.  Each path runs single-threaded
for the requested time on the same packet (same flow, opcode, payload); before timing, the template's frame is
checked to equal Scapy's, so the two figures measure the same output.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sw.roce.wire.decode import decode
from sw.roce.wire.flow import Flow
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.packets import scapy_frame
from sw.roce.wire.template import PacketTemplate

BENCH_FLOW_V4 = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "10.0.0.1", "10.0.0.2", 0x000011, 0x000022)
BENCH_FLOW_V6 = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "fd00::1", "fd00::2", 0x000011, 0x000022)


def _rate_pps(step: Callable[[int], object], seconds: float, batch: int) -> float:
    """Calls of ``step(i)`` per second, run in batches until ``seconds`` have passed."""
    done = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for i in range(done, done + batch):
            step(i & 0xFFFFFF)
        done += batch
        now = time.perf_counter()
        if now >= deadline:
            return done / (now - start)


def run_bench(
    seconds: float = 1.0, *, payload_bytes: int = 1024, opcode: Opcode = Opcode.RDMA_WRITE_MIDDLE, ipv6: bool = False
) -> dict[str, object]:
    """Measure packets/s of each path for ``seconds`` each; returns the JSON-ready figures."""
    flow = BENCH_FLOW_V6 if ipv6 else BENCH_FLOW_V4
    payload = bytes(i & 0xFF for i in range(payload_bytes))
    tpl = PacketTemplate(flow, opcode)
    if tpl.build(1, payload) != scapy_frame(flow, opcode, psn=1, payload=payload):
        raise AssertionError("template and Scapy frames differ: the benchmark would compare different work")
    frame = tpl.build(1, payload)
    build = tpl.build
    scapy_pps = _rate_pps(lambda i: scapy_frame(flow, opcode, psn=i, payload=payload), seconds, 20)
    template_pps = _rate_pps(lambda i: build(i, payload), seconds, 2000)
    decode_pps = _rate_pps(lambda i: decode(frame), seconds, 2000)
    return {
        "scapy_pps": round(scapy_pps),
        "template_pps": round(template_pps),
        "decode_pps": round(decode_pps),
        "speedup": round(template_pps / scapy_pps, 1),
        "opcode": opcode.name,
        "payload_bytes": payload_bytes,
        "frame_bytes": len(frame),
        "ip_version": flow.ip_version,
        "seconds_per_path": seconds,
    }
