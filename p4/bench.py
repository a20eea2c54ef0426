"""In-process throughput of the pipeline (``starpulse p4 bench``): frames built once, timed forwarding."""

from __future__ import annotations

import time
from typing import Any

from p4.errors import P4Error
from p4.pipeline import Pipeline
from p4.program import Program
from p4.runtime_cli import RuntimeCLI
from sw.clock import ManualClock

MIN_FRAME_BYTES = 14 + 20 + 8         # Ethernet + IPv4 + UDP headers
MAX_FRAME_BYTES = 9216                # the largest common jumbo frame
MAX_PACKETS = 10_000_000              # frames are referenced from one list: ~80 MB at this count


def check_bench_args(packets: int, size: int) -> None:
    """``--packets`` and ``--size`` within what the bench can build; else one P4Error naming the flag."""
    if not 1 <= packets <= MAX_PACKETS:
        raise P4Error(f"--packets {packets}: allowed 1..{MAX_PACKETS}")
    if not MIN_FRAME_BYTES <= size <= MAX_FRAME_BYTES:
        raise P4Error(f"--size {size}: allowed {MIN_FRAME_BYTES}..{MAX_FRAME_BYTES} bytes (Ethernet + IPv4 + UDP "
                      "headers up to a jumbo frame)")


def _frames(count: int, size: int) -> list[tuple[int, bytes]]:
    """IPv4/UDP frames to 10.0.x.y from port 1, padded to ``size`` bytes (64 B default: minimum Ethernet)."""
    frames = []
    for i in range(min(count, 256)):
        ip_payload = max(0, size - 14 - 20 - 8)
        total = 20 + 8 + ip_payload
        ip = bytearray([0x45, 0, total >> 8, total & 0xFF, 0, i, 0, 0, 64, 17, 0, 0,
                        10, 0, 0, 1, 10, 0, (i >> 8) & 0xFF, i & 0xFF])
        s = sum((ip[j] << 8) | ip[j + 1] for j in range(0, 20, 2))
        s = (s & 0xFFFF) + (s >> 16)
        s = (s & 0xFFFF) + (s >> 16)
        ck = ~s & 0xFFFF
        ip[10], ip[11] = ck >> 8, ck & 0xFF
        udp = bytes([0x30, 0x39, 0x12, 0xB7, (8 + ip_payload) >> 8, (8 + ip_payload) & 0xFF, 0, 0])
        eth = bytes.fromhex("000000000001" "000000000003" "0800")
        frames.append((1, eth + bytes(ip) + udp + bytes(ip_payload)))
    return [frames[i % len(frames)] for i in range(count)]


def run_bench(prog: Program, *, packets: int = 50000, size: int = 64, mode: str = "both",
              commands: str | None = None) -> dict[str, Any]:
    """Time ``process`` per packet and/or ``process_batch``; returns figures (nothing asserted here)."""
    check_bench_args(packets, size)
    pipe = Pipeline(prog, clock=ManualClock())
    cli = RuntimeCLI(pipe)
    if commands:
        cli.run_file(commands)
    elif "MyIngress.ipv4_lpm" in prog.tables and "MyIngress.ipv4_forward" in prog.actions:
        cli.execute("table_add MyIngress.ipv4_lpm MyIngress.ipv4_forward 10.0.0.0/8 => 00:00:00:00:00:02 2")
    frames = _frames(packets, size)
    pipe.process_batch(frames[:1000])  # warm-up
    runs = []
    if mode in ("single", "both"):
        process = pipe.process
        t0, c0 = time.perf_counter(), time.process_time()
        fwd = 0
        for port, frame in frames:
            fwd += len(process(port, frame)[0])
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        runs.append({"mode": "single", "packets": packets, "elapsed_s": dt, "cpu_s": dc, "pps": packets / dt,
                     "pps_per_cpu": packets / dc if dc else 0.0, "forwarded": fwd})
    if mode in ("batch", "both"):
        t0, c0 = time.perf_counter(), time.process_time()
        out = pipe.process_batch(frames)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        runs.append({"mode": "batch", "packets": packets, "elapsed_s": dt, "cpu_s": dc, "pps": packets / dt,
                     "pps_per_cpu": packets / dc if dc else 0.0, "forwarded": len(out)})
    return {"program": prog.name, "frame_bytes": len(frames[0][1]), "runs": runs}
