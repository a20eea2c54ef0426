"""The SoftNic's native port (issue 23 item 4): the C verdict that lets ``decode`` skip its checks is 1 only where the
Python reference accepts the frame and would find the same packet, and ``$STARPULSE_NIC_DATAPATH`` is read in one
place and refused with a one-line error when it names no data path."""

from __future__ import annotations

import pytest

from sw.roce.native import build as native_build
from sw.roce.softnic.native_port import ENV_NIC_DATAPATH, nic_datapath
from sw.roce.softnic.port import NicPortError
from sw.roce.wire.decode import decode
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.flow import Flow
from sw.roce.wire.int_md import IntHopRecord, insert_int
from sw.roce.wire.opcodes import LAYOUTS, Opcode
from sw.roce.wire.template import FlowTemplates

V4 = Flow("02:53:00:00:00:01", "02:53:00:00:fe:01", "10.0.0.1", "10.0.1.2", 0x101, 0x122)
V6 = Flow("02:53:00:00:00:01", "02:53:00:00:fe:01", "fd00::1", "fd00::2", 0x101, 0x122)
HOPS = [IntHopRecord(node_id=7, ingress_port=1, egress_port=3, hop_latency=12, queue_id=0, queue_occupancy=5,
                     egress_timestamp=1_000_123, egress_tx_bytes=0xFFFF_FF00)]
PAYLOAD = bytes(range(256)) * 4
EXT = HeaderFields(va=0x1234_5678, rkey=0xBEEF, dma_len=77, immdt=9, syndrome=0x60, msn=5, swapdt=1, cmpdt=2)


@pytest.fixture(scope="module")
def lib():
    module = native_build.load()
    if module is None:
        pytest.skip("no C compiler here (bootstrap installs gcc)")
    return module.lib


def _frames() -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for flow, fam in ((V4, "v4"), (V6, "v6")):
        tpls = FlowTemplates(flow)
        for op in LAYOUTS:
            tpl = tpls[op]
            for n in (0, 3, 1024) if tpl.has_payload else (0,):
                out[f"{fam}-{Opcode(op).name}-{n}"] = tpl.build(0xABCDE, PAYLOAD[:n], ext=EXT)
    good = out["v4-RDMA_WRITE_MIDDLE-1024"]
    flip = bytearray(good)
    flip[200] ^= 1
    out["bad-icrc"] = bytes(flip)
    csum = bytearray(good)
    csum[14 + 8] -= 1                                       # TTL changed, checksum not: a bad IPv4 checksum
    out["bad-ip-csum"] = bytes(csum)
    out["int"] = insert_int(good, HOPS, echo=False, remaining_hop_cnt=3)
    out["vlan"] = good[:12] + b"\x81\x00\x00\x05" + good[12:]
    out["padded"] = good + bytes(4)
    out["truncated"] = good[:-1]
    out["arp"] = bytes(42)
    return out


def test_verdict_is_one_only_where_the_reference_accepts_the_same_packet(lib) -> None:
    frames = _frames()
    fast = 0
    for name, frame in frames.items():
        verdict = lib.sp_nic_verdict(frame, len(frame))
        try:
            want = decode(frame)
        except RoceFormatError:
            want = None
        if verdict == 1:
            fast += 1
            assert want is not None and want.icrc_ok, name
            got = decode(frame, check_icrc=False)
            got.icrc_ok = True
            assert got == want, name
        else:
            assert verdict == 0, name
            assert want is None or name.startswith("v6") or name in ("int", "vlan"), name
    assert fast >= len(LAYOUTS) + 1                     # every IPv4 opcode (and the padded frame) takes the fast path


def test_nic_datapath_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_NIC_DATAPATH, raising=False)
    assert nic_datapath() == "native"
    monkeypatch.setenv(ENV_NIC_DATAPATH, "python")
    assert nic_datapath() == "python"
    monkeypatch.setenv(ENV_NIC_DATAPATH, "fast")
    with pytest.raises(NicPortError, match=r"STARPULSE_NIC_DATAPATH='fast': expected native or python"):
        nic_datapath()
