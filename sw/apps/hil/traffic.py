"""The bridged NIC's test traffic: one QP configured through the host driver (SEND ONLY template of a flow,
QP_INIT, rate; or DCQCN's parameters and cc_mode dcqcn, or HPCC's and cc_mode hpcc) and the doorbells of N MTU-sized
frames; the same steps free-running, in the bench and in tests."""

from __future__ import annotations

from typing import Any

from sw.cc import DcqcnParams, HpccParams
from sw.cc.nic_regs import PARAM_ADDR, TEMPLATE_BYTES
from sw.roce import Flow, FlowTemplates, Opcode
from sw.roce.softnic.rtl_nic_driver import RtlNicDriver


def flow_of(cfg: dict[str, Any], qp: int) -> Flow:
    """The flow of QP ``qp``: ``cfg["flow"]`` (Flow's fields) or a default pair of addresses."""
    fields = cfg.get("flow") or {"src_mac": "02:53:00:00:00:01", "dst_mac": "02:53:00:00:01:01",
                                 "src_ip": "10.250.0.1", "dst_ip": "10.250.0.2", "src_qpn": 0x300 + qp,
                                 "dst_qpn": 0x5000 + qp}
    return Flow(**fields)


async def configure_qp(nic: RtlNicDriver, qp: int, cfg: dict[str, Any], *, first_psn: int = 0,
                       rate_share: float = 1.0) -> None:
    """cc_mode none, QP ``qp``'s template (next PSN ``first_psn``), QP_INIT, rate ``rate_share`` of line."""
    await nic.check_id()
    await nic.set_cc_mode("none")
    header = FlowTemplates(flow_of(cfg, qp))[Opcode.SEND_ONLY].build(first_psn, b"")[:TEMPLATE_BYTES]
    await nic.write_template(qp, header)
    await nic.qp_init(qp)
    line = (int(cfg["data_width"]) // 8) << 24
    await nic.set_rate(qp, max(1, int(line * rate_share)))


def frame_bytes(n_frames: int, mtu_bytes: int) -> list[int]:
    """Doorbell sizes for ``n_frames`` frames of ``mtu_bytes`` payload (the scheduler cuts at the MTU)."""
    return [n_frames * mtu_bytes]


async def configure_dcqcn(nic: RtlNicDriver, qp: int, params: DcqcnParams) -> DcqcnParams:
    """Write ``params`` (the line rate first, so no bound clamps the rest), switch to cc_mode dcqcn and start QP
    ``qp`` afresh (its rate: the line rate); returns the parameters as the NIC holds them (read back)."""
    await nic.set_param("line_rate_kbps", params.line_rate_kbps)
    for name in DCQCN_FIELDS:
        if name != "line_rate_kbps":
            await nic.set_param(name, int(getattr(params, name)))
    held = {name: await nic.param(name) for name in DCQCN_FIELDS}
    await nic.set_cc_mode("dcqcn")
    await nic.qp_init(qp)
    return params.replace(**{k: bool(v) if k == "clamp_target_rate" else v for k, v in held.items()})


DCQCN_FIELDS = tuple(name for name in DcqcnParams.__dataclass_fields__ if name in PARAM_ADDR)
"""The ``DcqcnParams`` fields the NIC has a register for (the NP's ``cnp_interval_ns`` among them)."""


HPCC_FIELDS = ("line_rate_kbps", "min_rate_kbps", "base_rtt_ns", "eta_q16", "max_stage", "rate_ai_kbps")
"""The ``HpccParams`` fields the NIC has a register for (``hpcc_`` + name; the INT counter widths are built in)."""


async def configure_hpcc(nic: RtlNicDriver, qp: int, params: HpccParams, qlen_unit_bytes: int) -> HpccParams:
    """Write ``params`` (the line rate first, so no bound clamps the rest) and the INT queue unit, switch to cc_mode
    hpcc and start QP ``qp`` afresh (W = W_max, the line rate; its sent-frame count, hence its PSNs, from 0);
    returns the parameters as the NIC holds them (read back).  The engine derives its windows from them within
    ``HpccEngine.cfg_settle_clocks`` (114 clocks), far less than the register accesses that follow take."""
    await nic.set_param("hpcc_line_rate_kbps", params.line_rate_kbps)
    for name in HPCC_FIELDS[1:]:
        await nic.set_param(f"hpcc_{name}", int(getattr(params, name)))
    await nic.set_param("hpcc_qlen_unit_bytes", qlen_unit_bytes)
    held = {name: await nic.param(f"hpcc_{name}") for name in HPCC_FIELDS}
    await nic.set_cc_mode("hpcc")
    await nic.qp_init(qp)
    return params.replace(**held)
