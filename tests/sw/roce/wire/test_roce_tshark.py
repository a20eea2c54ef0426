"""Independent check: tshark's InfiniBand dissector reads every frame of ``starpulse roce pcap`` as RoCEv2."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from scapy.utils import rdpcap

from sw.roce.wire.icrc import icrc
from sw.roce.wire.opcodes import LAYOUTS, Opcode
from sw.roce.wire.sample_pcaps import (
    SAMPLE_FLOW_V4,
    SAMPLE_FLOW_V6,
    SAMPLE_PAYLOAD,
    pcap_name,
    sample_fields,
    write_frames,
)

pytestmark = pytest.mark.unit

TSHARK = shutil.which("tshark")


@pytest.fixture(scope="module")
def dissected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """tshark -T json of every frame of every per-opcode pcap, keyed by file name."""
    if TSHARK is None:
        pytest.skip("tshark is not installed (bootstrap installs it; `starpulse doctor` reports it)")
    from sw.apps.roce_cli import _run_pcap

    outdir = tmp_path_factory.mktemp("roce_pcaps")
    assert _run_pcap(str(outdir)) == 0
    # Read every file back with Scapy's pcap reader, then let one tshark run dissect them all.
    frames, owners = [], []
    for opcode in LAYOUTS:
        for pkt in rdpcap(str(outdir / pcap_name(opcode))):
            frames.append(bytes(pkt))
            owners.append(pcap_name(opcode))
    combined = outdir / "all.pcap"
    write_frames(combined, frames)
    # Let tshark verify the IPv4 header and UDP checksums too (off by default).
    out = subprocess.run([TSHARK, "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
                          "-r", str(combined), "-T", "json"], capture_output=True, text=True, timeout=120,
                         check=True)
    result: dict[str, list[dict]] = {}
    for owner, frame, packet in zip(owners, frames, json.loads(out.stdout), strict=True):
        layers = packet["_source"]["layers"]
        layers["_frame_bytes"] = frame
        result.setdefault(owner, []).append(layers)
    return result


def test_one_pcap_per_opcode_with_both_ip_versions(dissected):
    assert sorted(dissected) == sorted(pcap_name(op) for op in LAYOUTS)
    for name, frames in dissected.items():
        assert [("ip" in f, "ipv6" in f) for f in frames] == [(True, False), (False, True)], name


def _status(layer: dict, proto: str) -> str:
    """tshark's checksum status, which its JSON puts either in the layer or in the checksum's subtree."""
    key = f"{proto}.checksum.status"
    return layer.get(key) or layer[f"{proto}.checksum_tree"][key]


def _ib(layers: dict, header: str) -> dict:
    return layers["infiniband"][f"infiniband.{header}_tree"]


@pytest.mark.parametrize("opcode", list(LAYOUTS), ids=lambda op: op.name)
def test_tshark_reads_opcode_qp_psn_and_extended_headers(dissected, opcode: Opcode):
    want = sample_fields(opcode)
    for layers, flow in zip(dissected[pcap_name(opcode)], (SAMPLE_FLOW_V4, SAMPLE_FLOW_V6), strict=True):
        assert layers["frame"]["frame.protocols"].endswith(("udp:infiniband", "udp:infiniband:data"))
        assert layers["udp"]["udp.dstport"] == "4791"
        # checksum status: 1 = good, 3 = not present (UDP checksum 0 over IPv4, as RoCEv2 NICs send it)
        if flow.ip_version == 4:
            assert _status(layers["ip"], "ip") == "1"
            assert _status(layers["udp"], "udp") == "3"
        else:
            assert _status(layers["udp"], "udp") == "1"
        bth = _ib(layers, "bth")
        assert int(bth["infiniband.bth.opcode"]) == opcode
        assert int(bth["infiniband.bth.destqp"], 16) == flow.dst_qpn
        assert int(bth["infiniband.bth.psn"]) == want["psn"]
        assert bth["infiniband.bth.a"] == ("1" if want["ackreq"] else "0")
        assert int(bth["infiniband.bth.padcnt"]) == (-len(want["payload"]) & 3)
        headers = LAYOUTS[opcode].headers
        if "RETH" in headers:
            reth = _ib(layers, "reth")
            assert int(reth["infiniband.reth.va"], 16) == want["va"]
            assert int(reth["infiniband.reth.r_key"], 16) == want["rkey"]
            assert int(reth["infiniband.reth.dmalen"]) == want["dma_len"]
        if "ImmDt" in headers:
            assert layers["infiniband"]["infiniband.immdt"].replace(":", "") == f"{want['immdt']:08x}"
        if "AETH" in headers:
            aeth = _ib(layers, "aeth")
            assert int(aeth["infiniband.aeth.syndrome"]) == want["syndrome"]
            assert int(aeth["infiniband.aeth.msn"]) == want["msn"]
        if "AtomicETH" in headers:
            atomic = _ib(layers, "atomiceth")
            assert int(atomic["infiniband.reth.va"], 16) == want["va"]
            assert int(atomic["infiniband.reth.r_key"], 16) == want["rkey"]
            assert int(atomic["infiniband.atomiceth.swapdt"]) == want["swapdt"]
            assert int(atomic["infiniband.atomiceth.cmpdt"]) == want["cmpdt"]
        if "AtomicAckETH" in headers:
            ack = _ib(layers, "atomicacketh")
            assert int(ack["infiniband.atomicacketh.origremdt"]) == want["orig_rem_dt"]
        frame = layers["_frame_bytes"]
        l3 = frame[14:]
        if opcode == Opcode.CNP:
            # 0x81 is a vendor opcode to the IB dissector: it shows the 16 reserved bytes and the ICRC raw.
            assert bth["infiniband.reserved"] == "40"                  # BECN set
            vendor = layers["infiniband"]["infiniband.vendor_tree"]["infiniband.vendor"].replace(":", "")
            assert vendor == "00" * 16 + frame[-4:].hex()
        else:
            assert int(layers["infiniband"]["infiniband.invariant.crc"], 16) == int.from_bytes(frame[-4:], "big")
        assert icrc(l3) == int.from_bytes(frame[-4:], "little")          # and that ICRC is valid
        if LAYOUTS[opcode].has_payload:
            assert layers["data"]["data.data"].replace(":", "") == (SAMPLE_PAYLOAD + b"\0\0\0").hex()
