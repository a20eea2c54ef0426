"""Offline runner: pcaps in, pcaps out, like BMv2 simple_switch in pcap-file mode.

Packets enter in ascending timestamp order across ports (file order within a port), go through
ingress -> zero-delay queues -> egress -> deparser, and each egress port's frames are written to
``DIR/port<N>.pcap``; ``DIR/drops.txt`` counts drops by reason.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from p4.errors import P4Error
from p4.pipeline import Digest, Pipeline
from sw.units.pcap_file import PcapFormatError, read_pcap, write_pcap


@dataclass
class P4SimResult:
    outputs: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    drops: dict[str, int] = field(default_factory=dict)
    digests: list[Digest] = field(default_factory=list)
    packets_in: int = 0
    parser_errors: dict[str, int] = field(default_factory=dict)


def parse_in_spec(spec: str) -> tuple[int, Path]:
    """``PORT:FILE.pcap`` -> (port, path)."""
    port_s, sep, file = spec.partition(":")
    if not sep or not file:
        raise P4Error(f"--in {spec!r}: expected PORT:FILE.pcap, e.g. 1:h1.pcap")
    try:
        port = int(port_s, 0)
    except ValueError:
        raise P4Error(f"--in {spec!r}: port {port_s!r} is not a number") from None
    if not 0 <= port < 511:
        raise P4Error(f"--in {spec!r}: port {port} out of range 0..510")
    return port, Path(file)


def run(pipeline: Pipeline, inputs: list[tuple[int, Path]]) -> P4SimResult:
    """Feed every input frame through the pipeline in BMv2 pcap-mode order; collect outputs."""
    streams = []
    for order, (port, path) in enumerate(inputs):
        try:
            streams.append([(ts, order, i, port, frame) for i, (ts, frame) in enumerate(read_pcap(path))])
        except PcapFormatError as exc:
            raise P4Error(str(exc)) from None
    res = P4SimResult()
    outputs: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for ts, _order, _i, port, frame in heapq.merge(*streams):
        res.packets_in += 1
        out, ing = pipeline.process(port, frame)
        res.digests.extend(ing.digests)
        for eport, eframe in out:
            outputs[eport].append((ts, eframe))
    res.outputs = dict(outputs)
    res.drops = dict(pipeline.drops)
    res.parser_errors = dict(pipeline.parser_errors)
    return res


def write_outputs(res: P4SimResult, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for port, frames in sorted(res.outputs.items()):
        p = out_dir / f"port{port}.pcap"
        write_pcap(p, frames)
        written.append(p)
    lines = [f"packets_in {res.packets_in}", f"dropped_total {sum(res.drops.values())}"]
    lines += [f"{n} {reason}" for reason, n in sorted(res.drops.items())]
    lines += [f"parser_error {name} {n}" for name, n in sorted(res.parser_errors.items())]
    (out_dir / "drops.txt").write_text("\n".join(lines) + "\n")
    return written
