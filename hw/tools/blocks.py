"""The NIC's RTL blocks by Verilog module name, built at a chosen data width and QP count (CLI and tests)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from amaranth.back import verilog
from amaranth.lib import wiring

from hw.cnp import CnpGenerator
from hw.csr import CsrBank
from hw.dcqcn import DcqcnRpEngine
from hw.errors import HwParamError
from hw.hpcc import HpccEngine
from hw.icrc import IcrcChecker, IcrcGenerator
from hw.int_ack import HpccAckFeeder, IntAckParser
from hw.nic_top import NicCcTop
from hw.parser import RoceParser
from hw.sched import TxScheduler
from hw.tx_frame import MIN_DATA_WIDTH, TxFrameBuilder
from sw.cc.nic_regs import TX_WIRE_OVERHEAD_BYTES

DEFAULT_DATA_WIDTH = 1024
DEFAULT_N_QPS = 1024

BLOCKS: dict[str, tuple[str, Callable[[int, int], wiring.Component]]] = {
    "tx_sched": ("per-QP token-bucket rate limiter / round-robin scheduler (charging wire bytes as nic_cc_top "
                 "builds it: from 512 bits, payload + the frame's overhead)",
                 lambda width, qps: TxScheduler(data_width=width, n_qps=qps, frame_overhead_bytes=TX_WIRE_OVERHEAD_BYTES
                                                if width >= MIN_DATA_WIDTH else 0)),
    "dcqcn_rp": ("DCQCN reaction-point engine (per-QP rate control)",
                 lambda width, qps: DcqcnRpEngine(n_qps=qps)),
    "cnp_gen": ("DCQCN notification point (CNP pacing per QP)",
                lambda width, qps: CnpGenerator(n_qps=qps)),
    "roce_parser": ("RoCEv2 RX header parser (CE and CNP events)",
                    lambda width, qps: RoceParser(data_width=width, n_qps=qps)),
    "icrc_check": ("RoCEv2 ICRC checker (full width, one beat per clock)",
                   lambda width, qps: IcrcChecker(data_width=width)),
    "icrc_gen": ("RoCEv2 ICRC generator (appends the ICRC, full width, one beat per clock)",
                 lambda width, qps: IcrcGenerator(data_width=width)),
    "int_ack": ("INT-echo ACK parser (HPCC input from RoCE ACKs)",
                lambda width, qps: IntAckParser(data_width=width, n_qps=qps)),
    "hpcc_feeder": ("INT-echo ACK -> HPCC engine units (timestamps in ns, queue bytes, packet sequences)",
                    lambda width, qps: HpccAckFeeder(n_qps=qps)),
    "hpcc": ("INT/HPCC engine (per-QP window and rate from INT-echoing ACKs)",
             lambda width, qps: HpccEngine(n_qps=qps)),
    "tx_frame": (f"TX RoCEv2 framer: per-QP header templates, lengths, checksum, PSN, ICRC (>= {MIN_DATA_WIDTH} bits)",
                 lambda width, qps: TxFrameBuilder(data_width=max(width, MIN_DATA_WIDTH), n_qps=qps)),
    "csr_bank": ("CSR bus: per-QP rates (clamped, flagged), counters, error flags",
                 lambda width, qps: CsrBank(n_qps=qps, line_rate_reg=(width // 8) << 24)),
    "nic_cc_top": ("NIC CC top level: RX parsers, CNP generator, DCQCN RP, HPCC engine, TX scheduler -> RoCEv2 "
                   "framer (templates, PSNs, pattern payload, ICRC), CSR bank",
                   lambda width, qps: NicCcTop(data_width=width, n_qps=qps)),
}


def check_sizes(data_width: int, n_qps: int) -> None:
    """Reject sizes the blocks cannot be built at, naming the flag and the allowed values."""
    if data_width < 64 or data_width & (data_width - 1) or data_width > 4096:
        raise HwParamError(f"--data-width {data_width}: must be a power of two in 64..4096 bits")
    if n_qps < 2 or n_qps & (n_qps - 1) or n_qps > 65536:
        raise HwParamError(f"--qps {n_qps}: must be a power of two in 2..65536")


def build(name: str, data_width: int = DEFAULT_DATA_WIDTH, n_qps: int = DEFAULT_N_QPS) -> wiring.Component:
    check_sizes(data_width, n_qps)
    return BLOCKS[name][1](data_width, n_qps)


def write_verilog(outdir: Path, data_width: int = DEFAULT_DATA_WIDTH,
                  n_qps: int = DEFAULT_N_QPS) -> list[Path]:
    """Write ``<block>.v`` for every block into ``outdir``; returns the paths written."""
    check_sizes(data_width, n_qps)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in BLOCKS:
        path = outdir / f"{name}.v"
        path.write_text(verilog.convert(build(name, data_width, n_qps), name=name, emit_src=False))
        paths.append(path)
    return paths
