"""The RTL NIC's (``nic_cc_top``) register map: addresses, error bits, CC modes, counters and the parameter table.

Pure data, the one definition: ``hw.csr`` and ``hw.nic_top`` build the registers from it, a host driver
(``sw.roce.softnic.rtl_nic_driver``) addresses them by it without importing the RTL.  See ``hw.csr`` for the bus and the
meaning of each word, ``hw.nic_top`` for the counters and parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

from sw.cc.dcqcn import DcqcnParams
from sw.cc.fixedpoint import BITS_NS_PER_KBPS, U_ONE
from sw.cc.hpcc import HpccParams
from sw.units import ETH_WIRE_OVERHEAD_BYTES, ROCE_DATA_FRAME_OVERHEAD_BYTES

CSR_ID = 0x53504E31
REG_ID, REG_QP_SEL, REG_QP_RATE, REG_ERR, REG_COUNTER0 = range(5)
REG_QP_INIT = 0x40
REG_PARAM0 = 0x41
REG_TMPL_WR = 0x7F
REG_TMPL0 = 0x80
ADDR_BITS = 8
MAX_COUNTERS = REG_QP_INIT - REG_COUNTER0
ERR_QP, ERR_CLAMP, ERR_ADDR, ERR_VALUE = 1, 2, 4, 8
POLICIES = ("clamp", "reject")
TEMPLATE_BYTES = 14 + 20 + 8 + 12  # Ethernet, IPv4, UDP, BTH: a QP's header template
TX_WIRE_OVERHEAD_BYTES = ROCE_DATA_FRAME_OVERHEAD_BYTES + ETH_WIRE_OVERHEAD_BYTES
"""What the limiter charges per frame beyond its payload where the framer is built (>= 512 bits): the template's
headers and the ICRC (``TEMPLATE_BYTES`` + 4) and the Ethernet wire overhead, as the software NIC's pacer charges
a frame's bytes plus ``ETH_WIRE_OVERHEAD_BYTES``: QP_RATE and the CC engines' rates are wire rates there."""
CC_MODE_NONE, CC_MODE_DCQCN, CC_MODE_HPCC = 0, 1, 2
U32 = (1 << 32) - 1
CC_MODES = {"none": CC_MODE_NONE, "dcqcn": CC_MODE_DCQCN, "hpcc": CC_MODE_HPCC}

COUNTERS = (
    ("CNP_SENT", "CNP requests handed out on cnp_req"),
    ("CNP_RECEIVED", "CNPs (BTH opcode 0x81) received with a good ICRC"),
    ("CE_SEEN", "CE-marked RoCE data packets received with a good ICRC"),
    ("CLAMPS", "CSR writes clamped (QP_RATE above line rate, parameters out of range)"),
    ("RX_ROCE", "RoCEv2 packets received"),
    ("RX_EVENTS_DROPPED", "CE/CNP events lost in mode dcqcn because the CNP generator or the CNP FIFO was full"),
    ("TX_PKTS", "frames sent by the scheduler"),
    ("TX_BYTES", "bytes sent by the scheduler (low 32 bits)"),
    ("RATE_UPDATES", "CC engine (DCQCN or HPCC) rate writes applied to the scheduler"),
    ("SENT_DROPPED", "sent-packet byte counts lost because the reaction point's queue was full"),
    ("INT_ACKS", "RoCE ACKs with echoed INT hops received"),
    ("INT_ACKS_DROPPED", "INT-echo ACKs lost in mode hpcc because the HPCC engine's FIFO was full"),
    ("HPCC_UPDATES", "HPCC window/rate updates (ACKs that measured a hop)"),
    ("RX_ICRC_ERRORS", "RoCEv2 frames (no INT) with a wrong ICRC: their CE/CNP events dropped"),
    ("TX_FRAMES", "frames that left on tx_m_axis (RoCEv2 with ICRC; below 512 bits the scheduler's frames)"),
)
COUNTER_ADDR = {name: REG_COUNTER0 + i for i, (name, _) in enumerate(COUNTERS)}


def line_rate_kbps(data_width: int, clk_period_ps: int) -> int:
    """The NIC line rate in kb/s: one beat per clock."""
    return data_width * 1_000_000_000 // clk_period_ps


@dataclass(frozen=True)
class ParamReg:
    """One run-time parameter register: its range (a bound may name another parameter) and what a bad write does.

    ``lo``/``hi`` are ints or the name of an earlier-or-later entry whose current value is the bound (e.g. a
    minimum rate never above the line rate); ``policy`` "clamp" stores the nearest bound and sets ERR_CLAMP,
    "reject" keeps the old value and sets ERR_VALUE.
    """

    name: str
    width: int
    reset: int
    lo: int | str
    hi: int | str
    policy: str
    doc: str


def template_words(template_bytes: int) -> int:
    """32-bit TMPL words that stage a ``template_bytes`` header."""
    return -(-template_bytes // 4)


def hpcc_max_rtt_ns(line_kbps: int) -> int:
    """Largest HPCC base RTT whose window at the NIC line rate fits the engine's 32-bit registers."""
    return min(100_000_000, ((1 << 32) * BITS_NS_PER_KBPS - 1) // line_kbps)


def hpcc_reset(line_kbps: int) -> HpccParams:
    """HPCC parameters after reset: the model's defaults at the NIC line rate (min rate and R_AI at most 1 %)."""
    d = HpccParams()
    return HpccParams(line_rate_kbps=line_kbps, min_rate_kbps=min(d.min_rate_kbps, max(1, line_kbps // 100)),
                      rate_ai_kbps=min(d.rate_ai_kbps, line_kbps // 100),
                      base_rtt_ns=min(d.base_rtt_ns, hpcc_max_rtt_ns(line_kbps)))


def nic_params(*, line_kbps: int, timer_min_ns: int, mtu_bytes: int) -> tuple[ParamReg, ...]:
    """The parameter registers, in address order from 0x41: one table for ranges, policies and resets.

    Ranges are the golden models' (``sw.cc.DcqcnParams``, ``sw.cc.HpccParams``) narrowed to what the RTL
    serves: timers above the sweep interval, a byte counter above the MTU, rates up to the NIC line rate, min
    rate <= line rate, an HPCC base RTT whose window at line rate fits 32 bits.
    """
    d = DcqcnParams()
    h = hpcc_reset(line_kbps)
    timer_reset = max(d.alpha_timer_ns, timer_min_ns)
    return (
        ParamReg("cc_mode", 2, CC_MODE_DCQCN, CC_MODE_NONE, CC_MODE_HPCC, "reject",
                 "0 none, 1 dcqcn, 2 hpcc"),
        ParamReg("cnp_interval_ns", 32, d.cnp_interval_ns, 0, U32, "clamp", "NP: min ns between CNPs of a QP"),
        ParamReg("line_rate_kbps", 32, line_kbps, "min_rate_kbps", line_kbps, "clamp",
                 "RP: rate a QP starts at and never exceeds"),
        ParamReg("min_rate_kbps", 32, min(d.min_rate_kbps, line_kbps), 1, "line_rate_kbps", "clamp",
                 "RP: floor of a cut"),
        ParamReg("g_shift", 5, d.g_shift, 1, 16, "reject", "RP: alpha gain g = 2^-g_shift"),
        ParamReg("alpha_init_q16", 17, d.alpha_init_q16, 0, 1 << 16, "clamp", "RP: alpha after QP_INIT, Q1.16"),
        ParamReg("alpha_timer_ns", 32, timer_reset, timer_min_ns, U32, "reject", "RP: alpha decay period K"),
        ParamReg("rate_timer_ns", 32, timer_reset, timer_min_ns, U32, "reject", "RP: rate-increase period T"),
        ParamReg("byte_counter_bytes", 32, d.byte_counter_bytes, mtu_bytes + 1, U32, "reject",
                 "RP: rate-increase byte counter B"),
        ParamReg("fast_recovery_stages", 8, d.fast_recovery_stages, 0, 254, "clamp", "RP: F"),
        ParamReg("rate_ai_kbps", 32, min(d.rate_ai_kbps, line_kbps), 0, line_kbps, "clamp",
                 "RP: additive increase R_AI"),
        ParamReg("rate_hai_kbps", 32, min(d.rate_hai_kbps, line_kbps), 0, line_kbps, "clamp",
                 "RP: hyper increase R_HAI"),
        ParamReg("clamp_target_rate", 1, int(d.clamp_target_rate), 0, 1, "reject", "RP: Rt = Rc on every CNP"),
        ParamReg("hpcc_line_rate_kbps", 32, h.line_rate_kbps, "hpcc_min_rate_kbps", line_kbps, "clamp",
                 "HPCC: rate after init, max rate, every hop's B"),
        ParamReg("hpcc_min_rate_kbps", 32, h.min_rate_kbps, 1, "hpcc_line_rate_kbps", "clamp",
                 "HPCC: min rate (W_min = it x T)"),
        ParamReg("hpcc_base_rtt_ns", 32, h.base_rtt_ns, 100, hpcc_max_rtt_ns(line_kbps), "reject",
                 "HPCC: base RTT T"),
        ParamReg("hpcc_eta_q16", 17, h.eta_q16, 1, U_ONE, "reject", "HPCC: target utilisation eta, Q.16"),
        ParamReg("hpcc_max_stage", 8, h.max_stage, 0, 254, "clamp", "HPCC: additive stages maxStage"),
        ParamReg("hpcc_rate_ai_kbps", 32, h.rate_ai_kbps, 0, "hpcc_line_rate_kbps", "clamp",
                 "HPCC: additive step (W_AI = it x T)"),
        ParamReg("hpcc_qlen_unit_bytes", 16, mtu_bytes + ROCE_DATA_FRAME_OVERHEAD_BYTES, 1, 0xFFFF, "clamp",
                 "HPCC: bytes per INT queue-occupancy unit"),
    )


# parameter names and order (their addresses) do not depend on the build's sizes (here: 1024 bits at 400 MHz)
PARAM_ADDR = {p.name: REG_PARAM0 + i for i, p in
              enumerate(nic_params(line_kbps=line_rate_kbps(1024, 2500), timer_min_ns=1, mtu_bytes=4096))}
