"""The native host NIC data path (issue 23, item 4) against the Python reference: byte-identical frames, the same
receive verdicts (INT stripped, bad ICRC caught), tshark reads the native frames, and the one-line fallback to
Python when no C compiler builds it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sw.roce.native import build as native_build
from sw.roce.native.datapath import NativeDatapath, TxFlow, check_frame, make_datapath
from sw.roce.wire.fields import HeaderFields
from sw.roce.wire.flow import Flow
from sw.roce.wire.icrc import icrc
from sw.roce.wire.int_md import IntHopRecord, insert_int
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.sample_pcaps import write_frames
from sw.roce.wire.template import PacketTemplate

FLOW = Flow("02:53:00:00:00:01", "02:53:00:00:fe:01", "10.0.0.1", "10.0.1.2", 0x101, 0x122)
HOPS = [IntHopRecord(node_id=7, ingress_port=1, egress_port=3, hop_latency=12, queue_id=0, queue_occupancy=5,
                     egress_timestamp=1_000_123, egress_tx_bytes=0xFFFF_FF00)]
PAYLOAD = bytes((i * 7 + 3) & 0xFF for i in range(4096))


@pytest.fixture(scope="module")
def native() -> NativeDatapath:
    module = native_build.load()
    if module is None:
        pytest.skip("no C compiler here (bootstrap installs gcc)")
    return NativeDatapath(module)


def _flow(opcode: Opcode, n: int) -> TxFlow:
    tpl = PacketTemplate(FLOW, opcode)
    return TxFlow(tpl, PAYLOAD[:n] if tpl.has_payload else b"")


@pytest.mark.unit
@pytest.mark.parametrize("opcode", [Opcode.RDMA_WRITE_MIDDLE, Opcode.RDMA_WRITE_LAST, Opcode.SEND_ONLY,
                                    Opcode.RDMA_READ_RESPONSE_MIDDLE, Opcode.ACKNOWLEDGE], ids=lambda o: o.name)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 64, 1023, 1024, 4096])
def test_native_frames_are_byte_identical_to_the_template(native: NativeDatapath, opcode: Opcode, n: int) -> None:
    flow = _flow(opcode, n)
    psn0 = 0xFFFFFD                                  # the PSN wraps inside the burst
    got = native.build(flow, psn0, 6)
    want = [flow.template.build((psn0 + i) & 0xFFFFFF, flow.payload) for i in range(6)]
    assert got == want


@pytest.mark.unit
def test_native_frame_with_reth_is_byte_identical(native: NativeDatapath) -> None:
    tpl = PacketTemplate(FLOW, Opcode.RDMA_WRITE_ONLY)
    ext = HeaderFields(va=0x1234_5678_9ABC, rkey=0xBEEF, dma_len=1000)
    frame0 = tpl.build(0, PAYLOAD[:1000], ext=ext)
    out = native.ffi.new("uint8_t[]", len(frame0) * 3)
    assert native.lib.sp_build(frame0, len(frame0), 77, 3, out) == 0
    raw = bytes(native.ffi.buffer(out))
    assert [raw[i * len(frame0):(i + 1) * len(frame0)] for i in range(3)] == [
        tpl.build(77 + i, PAYLOAD[:1000], ext=ext) for i in range(3)]


@pytest.mark.unit
def test_native_refuses_ipv6_templates(native: NativeDatapath) -> None:
    v6 = Flow("02:00:00:00:00:01", "02:00:00:00:00:02", "fd00::1", "fd00::2", 0x11, 0x22)
    flow = TxFlow(PacketTemplate(v6, Opcode.RDMA_WRITE_MIDDLE), PAYLOAD[:64])
    with pytest.raises(ValueError, match="IPv4"):
        native.build(flow, 0, 1)


@pytest.mark.unit
def test_receive_verdicts_agree_with_the_python_reference(native: NativeDatapath) -> None:
    good = _flow(Opcode.RDMA_WRITE_MIDDLE, 1024).frame0
    with_int = insert_int(good, HOPS, echo=False, remaining_hop_cnt=3)
    bad = bytearray(good)
    bad[100] ^= 0x40                                   # payload bit flip: the ICRC no longer matches
    bad_int = bytearray(with_int)
    bad_int[-10] ^= 1
    ecn_ce = bytearray(good)
    ecn_ce[15] |= 3                                    # CE mark: TOS is masked out of the ICRC, IPv4 csum is not
    cases = {"good": (bytes(good), 1), "int": (with_int, 1), "bad": (bytes(bad), 0), "bad_int": (bytes(bad_int), 0),
             "arp": (bytes(42), -1), "short": (good[:40], -1), "udp_other_port": (good[:36] + b"\x00\x35" +
                                                                               good[38:], -1)}
    for name, (frame, verdict) in cases.items():
        assert native.check(frame) == verdict, name
        assert check_frame(frame) == verdict, name
    assert native.check(bytes(ecn_ce)) == 1 and icrc(bytes(ecn_ce)[14:]) == icrc(good[14:])


@pytest.mark.unit
@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_reads_native_frames(native: NativeDatapath, tmp_path: Path) -> None:
    flow = _flow(Opcode.RDMA_WRITE_MIDDLE, 1024)
    frames = native.build(flow, 0xFFFFFE, 3)
    write_frames(tmp_path / "native.pcap", frames)
    out = subprocess.run(["tshark", "-o", "ip.check_checksum:TRUE", "-r", str(tmp_path / "native.pcap"), "-T",
                          "json"], capture_output=True, text=True, timeout=60, check=True)
    packets = [p["_source"]["layers"] for p in json.loads(out.stdout)]
    assert len(packets) == 3
    for i, (layers, frame) in enumerate(zip(packets, frames, strict=True)):
        assert layers["frame"]["frame.protocols"].endswith(("udp:infiniband", "udp:infiniband:data"))
        bth = layers["infiniband"]["infiniband.bth_tree"]
        assert int(bth["infiniband.bth.opcode"]) == Opcode.RDMA_WRITE_MIDDLE
        assert int(bth["infiniband.bth.psn"]) == (0xFFFFFE + i) & 0xFFFFFF
        assert int(bth["infiniband.bth.destqp"], 16) == FLOW.dst_qpn
        assert int(layers["infiniband"]["infiniband.invariant.crc"], 16) == int.from_bytes(frame[-4:], "big")
        ip = layers["ip"]
        assert (ip.get("ip.checksum.status") or ip["ip.checksum_tree"]["ip.checksum.status"]) == "1"


@pytest.mark.unit
def test_no_compiler_falls_back_to_python_with_one_warning(tmp_path: Path) -> None:
    code = ("import warnings, sys\n"
            "from sw.roce.native.datapath import make_datapath\n"
            "dp = make_datapath('native'); dp2 = make_datapath('native')\n"
            "print(dp.name, dp2.name)\n")
    env = {**os.environ, "CC": "/nonexistent/cc", "XDG_CACHE_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=Path(__file__).resolve().parents[4])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["python", "python"]
    warns = [ln for ln in out.stderr.splitlines() if "native data path unavailable" in ln]
    assert len(warns) == 1, out.stderr


@pytest.mark.unit
def test_unknown_datapath_is_refused() -> None:
    with pytest.raises(ValueError, match="--datapath 'c'"):
        make_datapath("c")
