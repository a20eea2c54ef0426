"""PFC classification of INT-carrying RoCEv2 over IPv6: the switch finds the shim after the IPv6 and UDP headers
and classifies the packet by the DSCP the shim keeps (its lossless RoCE priority), as it does over IPv4."""

from __future__ import annotations

import pytest

from p4.switch.pfc import PfcManager, int_orig_dscp
from p4.switch.tm import TrafficManager
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.flow import Flow
from sw.roce.wire.int_md import DSCP_INT, IntHopRecord, insert_int
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.template import FlowTemplates

pytestmark = pytest.mark.unit


def _frame(src_ip: str, dst_ip: str, with_int: bool) -> bytes:
    flow = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", src_ip, dst_ip, 3, 4, dscp=26)
    frame = FlowTemplates(flow)[Opcode.RDMA_WRITE_ONLY].build(1, b"data", ext=HeaderFields(va=0, rkey=1, dma_len=4))
    return insert_int(frame, [IntHopRecord(1, 2, 3, 4, 0, 5, 6, 7)], echo=False, remaining_hop_cnt=3) \
        if with_int else frame


@pytest.mark.parametrize("ips", [("10.0.0.1", "10.0.0.2"), ("fd00:5350::a00:1", "fd00:5350::a00:2")])
def test_int_frames_classify_by_the_shims_dscp_on_both_ip_versions(ips):
    pfc = PfcManager(TrafficManager(priority_levels=8, default_depth_pkts=100), lambda *_: None)
    pfc.set_dscp_priority(26, 3)
    pfc.set_dscp_priority(DSCP_INT, "int")
    stamped = _frame(*ips, with_int=True)
    assert int_orig_dscp(stamped) == 26
    assert pfc.classify(stamped, 0) == 3 == pfc.classify(_frame(*ips, with_int=False), 0)
