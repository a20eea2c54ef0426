"""The bridged NIC's test traffic: one QP configured through the host driver (SEND ONLY template of a flow,
QP_INIT, rate) and the doorbells of N MTU-sized frames; the same steps free-running, in the bench and in tests."""

from __future__ import annotations

from typing import Any

from sw.cc.nic_regs import TEMPLATE_BYTES
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
