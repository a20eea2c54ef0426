"""Independent check of the atomic packets the transport sends: tshark's InfiniBand dissector reads the
COMPARE_SWAP / FETCH_ADD requests (AtomicETH) and the ATOMIC ACKNOWLEDGEs (AETH + AtomicAckETH) captured on
the in-memory wire, over IPv4 and IPv6, with the operands, the original values and a valid ICRC.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest

from sw.clock import ManualClock
from sw.roce.softnic.loopback import LinkProfile, MemoryWire, run_until
from sw.roce.softnic.nic import SoftNic
from sw.roce.transport.qp import QpState
from sw.roce.transport.verbs import ACCESS_ALL, Access, SendWr, WcStatus, WrOpcode
from sw.roce.wire.icrc import icrc
from sw.roce.wire.sample_pcaps import write_frames

pytestmark = pytest.mark.unit

TSHARK = shutil.which("tshark")
RATE_BPS = 1_000_000_000


def _atomic_frames(ips: tuple[str, str]) -> tuple[list[bytes], dict[str, int]]:
    """Run one CAS (that matches) and one FAA between two NICs; return every frame and the values involved."""
    clock = ManualClock()
    frames: list[bytes] = []
    profile = LinkProfile(rate_bps=RATE_BPS, drop=lambda f: frames.append(f) and False)
    wire = MemoryWire(clock, profile, profile)
    a, b = (SoftNic(wire.ports[i], mac=f"02:00:00:00:00:0{i + 1}", ip=ips[i], line_rate_bps=RATE_BPS, clock=clock)
            for i in range(2))
    pd_a, pd_b = a.alloc_pd(), b.alloc_pd()
    cq = a.create_cq()
    qa, qb = a.create_qp(pd_a, cq), b.create_qp(pd_b, b.create_cq())
    for qp, peer, nic in ((qa, qb, b), (qb, qa, a)):
        qp.modify(QpState.INIT)
        qp.modify(QpState.RTR, dest_qp_num=peer.qp_num, dest_mac=nic.mac, dest_ip=nic.ip, path_mtu=1024, rq_psn=77)
        qp.modify(QpState.RTS, sq_psn=77)
    remote = np.array([0x0123456789ABCDEF, 40], dtype=np.uint64)
    mr_r = pd_b.reg_mr(remote, ACCESS_ALL | Access.REMOTE_ATOMIC)
    mr_l = pd_a.reg_mr(np.zeros(2, dtype=np.uint64))
    qa.post_send(SendWr(1, WrOpcode.ATOMIC_CMP_AND_SWP, mr_l.sge(0, 8), remote_addr=mr_r.addr, rkey=mr_r.rkey,
                        compare_add=0x0123456789ABCDEF, swap=0xFEDCBA9876543210))
    qa.post_send(SendWr(2, WrOpcode.ATOMIC_FETCH_AND_ADD, mr_l.sge(8, 8), remote_addr=mr_r.addr + 8,
                        rkey=mr_r.rkey, compare_add=2))
    got: list = []
    assert run_until(clock, wire, [a, b], lambda: bool(got.extend(cq.poll()) or len(got) == 2), 10**9)
    assert [w.status for w in got] == [WcStatus.SUCCESS, WcStatus.SUCCESS]
    assert remote.tolist() == [0xFEDCBA9876543210, 42] and mr_l.buf.tolist() == [0x0123456789ABCDEF, 40]
    values = {"va": mr_r.addr, "rkey": mr_r.rkey, "dqpn_req": qb.qp_num, "dqpn_ack": qa.qp_num}
    return frames, values


@pytest.fixture(scope="module", params=[("10.9.0.1", "10.9.0.2"), ("fd00::1", "fd00::2")], ids=["ipv4", "ipv6"])
def dissected(request, tmp_path_factory) -> tuple[list[bytes], list[dict], dict[str, int]]:
    if TSHARK is None:
        pytest.skip("tshark is not installed (bootstrap installs it; `starpulse doctor` reports it)")
    frames, values = _atomic_frames(request.param)
    pcap = tmp_path_factory.mktemp("atomic") / "atomic.pcap"
    write_frames(pcap, frames)
    out = subprocess.run([TSHARK, "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE", "-r", str(pcap),
                          "-T", "json"], capture_output=True, text=True, timeout=120, check=True)
    layers = [p["_source"]["layers"] for p in json.loads(out.stdout)]
    return frames, layers, values


def _ib(layers: dict, header: str) -> dict:
    return layers["infiniband"][f"infiniband.{header}_tree"]


def test_tshark_reads_atomic_requests_and_atomic_acks(dissected):
    frames, layers, values = dissected
    opcodes = [int(_ib(f, "bth")["infiniband.bth.opcode"]) for f in layers]
    assert opcodes == [0x13, 0x14, 0x12, 0x12], "CAS and FAA requests, then one ATOMIC ACKNOWLEDGE each"
    cas, faa, ack_cas, ack_faa = layers
    for req, va, swap, cmp in ((cas, values["va"], 0xFEDCBA9876543210, 0x0123456789ABCDEF),
                               (faa, values["va"] + 8, 2, 0)):
        eth = _ib(req, "atomiceth")
        assert int(eth["infiniband.reth.va"], 16) == va
        assert int(eth["infiniband.reth.r_key"], 16) == values["rkey"]
        assert int(eth["infiniband.atomiceth.swapdt"]) == swap
        assert int(eth["infiniband.atomiceth.cmpdt"]) == cmp
        assert _ib(req, "bth")["infiniband.bth.a"] == "1"
        assert int(_ib(req, "bth")["infiniband.bth.destqp"], 16) == values["dqpn_req"]
    psns = [int(_ib(f, "bth")["infiniband.bth.psn"]) for f in layers]
    assert psns == [77, 78, 77, 78], "one PSN per atomic; each ACK echoes its request's PSN"
    for ack, orig in ((ack_cas, 0x0123456789ABCDEF), (ack_faa, 40)):
        assert int(_ib(ack, "atomicacketh")["infiniband.atomicacketh.origremdt"]) == orig
        assert int(_ib(ack, "aeth")["infiniband.aeth.syndrome"]) == 0x1F  # ACK, credits invalid
        assert int(_ib(ack, "bth")["infiniband.bth.destqp"], 16) == values["dqpn_ack"]
    for frame, f in zip(frames, layers, strict=True):
        assert f["frame"]["frame.protocols"].endswith("udp:infiniband")
        assert int(f["infiniband"]["infiniband.invariant.crc"], 16) == int.from_bytes(frame[-4:], "big")
        assert icrc(frame[14:]) == int.from_bytes(frame[-4:], "little")
        udp = f["udp"]
        status = udp.get("udp.checksum.status") or udp["udp.checksum_tree"]["udp.checksum.status"]
        assert status == ("1" if "ipv6" in f else "3"), "IPv6: checksum good; IPv4: 0 (not present), as NICs send"
