"""The SoftNic on the native data path (issue 23 item 4, ``sw.roce.softnic.native_port``) against the Python port:
the same RC exchange over a veth pair (three QPs, RDMA WRITE and SEND, one request frame lost on the way) puts
byte-identical frames on the wire in the same order and gives identical completions and data; tshark reads the
native NIC's frames as RoCEv2 with a valid ICRC; the receive stamps still feed the NIC's receive lag."""

from __future__ import annotations

import itertools
import json
import select
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from emu.netns import NetnsLab
from sw.clock import get_clock
from sw.roce.native import build as native_build
from sw.roce.softnic.native_port import NativeRawSocketPort
from sw.roce.softnic.nic import SoftNic
from sw.roce.softnic.port import RawSocketPort
from sw.roce.transport import verbs
from sw.roce.transport.qp_connect import connect, qp_info
from sw.roce.transport.verbs import RecvWr, SendWr, Sge, WcStatus, WrOpcode
from sw.roce.wire.decode import decode
from sw.roce.wire.sample_pcaps import write_frames

pytestmark = pytest.mark.emu

RATE_BPS = 10_000_000_000
QPS = 3
WRITE_BYTES = 20_000
SEND_BYTES = 3_000
LOST_FRAME = 4          # the 5th data frame host a sends is lost: the peer NAKs (sequence error), a goes back


def _exchange(a_if: str, b_if: str, native: Any) -> dict[str, Any]:
    """Run the exchange once on fresh NICs; return every frame each side received (the wire), the completions
    (wr_id, status, opcode, byte_len) and the data that landed, and the receive lag samples."""
    def port(ifname: str) -> RawSocketPort:
        if native is None:
            return RawSocketPort(ifname, claim_udp_port=False)
        return NativeRawSocketPort(ifname, native, claim_udp_port=False)

    pa, pb = port(a_if), port(b_if)
    wire: dict[str, list[bytes]] = {"a": [], "b": []}
    for side, p in (("a", pa), ("b", pb)):
        recv = p.recv_batch

        def recorded(n: int, recv: Callable[[int], list[bytes]] = recv, side: str = side) -> list[bytes]:
            frames = recv(n)
            wire[side].extend(frames)
            return frames

        p.recv_batch = recorded  # type: ignore[method-assign]
    sent = {"data": 0}

    def lossy(frames: list[bytes]) -> list[bytes]:
        kept = []
        for f in frames:
            if len(f) > 200:                           # a data frame (ACKs and CNPs are short)
                sent["data"] += 1
                if sent["data"] == LOST_FRAME + 1:
                    continue
            kept.append(f)
        return kept

    if native is None:
        send_one = pa.send

        def send(frame: bytes) -> None:
            for f in lossy([frame]):
                send_one(f)

        pa.send = send  # type: ignore[method-assign]
    else:
        send_many = pa.send_batch
        pa.send_batch = lambda frames: send_many(lossy(frames))  # type: ignore[attr-defined]
    a = SoftNic(pa, mac=pa.mac, ip=pa.ip, line_rate_bps=RATE_BPS)
    b = SoftNic(pb, mac=pb.mac, ip=pb.ip, line_rate_bps=RATE_BPS)
    verbs._key_counter = itertools.count(0x1000)     # the same memory keys in both runs (else a global count)
    pda, pdb = a.alloc_pd(), b.alloc_pd()
    cqa, cqb = a.create_cq(), b.create_cq()
    rng = np.random.default_rng(23)
    srcs, dsts, rbufs, wcs_a, wcs_b = [], [], [], [], []
    for i in range(QPS):
        qa, qb = a.create_qp(pda, cqa), b.create_qp(pdb, cqb)
        ia, ib = qp_info(qa, 1000 + i), qp_info(qb, 5000 + i)
        connect(qa, 1000 + i, ib, path_mtu=1024)
        connect(qb, 5000 + i, ia, path_mtu=1024)
        src = rng.integers(0, 256, WRITE_BYTES + SEND_BYTES, dtype=np.uint8)
        dst, rbuf = np.zeros(WRITE_BYTES, np.uint8), np.zeros(SEND_BYTES, np.uint8)
        ms, md, mr = pda.reg_mr(src), pdb.reg_mr(dst), pdb.reg_mr(rbuf)
        qb.post_recv(RecvWr(100 + i, mr.sge()))
        sge = ms.sge()
        qa.post_send(SendWr(10 + i, WrOpcode.RDMA_WRITE, Sge(sge.addr, WRITE_BYTES, sge.lkey),
                            remote_addr=md.addr, rkey=md.rkey))
        qa.post_send(SendWr(20 + i, WrOpcode.SEND, Sge(sge.addr + WRITE_BYTES, SEND_BYTES, sge.lkey)))
        srcs.append(src)
        dsts.append(dst)
        rbufs.append(rbuf)
    clock = get_clock()
    end_ns = clock.now_ns() + 30_000_000_000
    while (len(wcs_a) < 2 * QPS or len(wcs_b) < QPS) and clock.now_ns() < end_ns:
        busy = a.progress()                       # lockstep: a, then b, in one thread
        busy = b.progress() or busy
        wcs_a.extend(cqa.poll(16))
        wcs_b.extend(cqb.poll(16))
        if not busy:
            select.select([pa.sock, pb.sock], [], [], 0.001)
    out = {"wire": wire, "wc_a": [(w.wr_id, w.status, w.opcode, w.byte_len) for w in wcs_a],
           "wc_b": [(w.wr_id, w.status, w.opcode, w.byte_len) for w in wcs_b],
           "data_ok": all(np.array_equal(d, s[:WRITE_BYTES]) and np.array_equal(r, s[WRITE_BYTES:])
                          for s, d, r in zip(srcs, dsts, rbufs, strict=True)),
           "retransmits": a.qp_counters(), "rx_lag_events": b.rx_lag.events, "counters_b": b.counters}
    a.close()
    b.close()
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    module = native_build.load()
    if module is None:
        pytest.skip("no C compiler here (bootstrap installs gcc)")
    with NetnsLab() as lab:
        a, b = f"{lab.prefix}x"[:15], f"{lab.prefix}y"[:15]
        lab.add_link(None, None, ifname_a=a, ifname_b=b, addr_a="10.0.0.1/24", addr_b="10.0.1.2/24", mtu=1500)
        return {"python": _exchange(a, b, None), "native": _exchange(a, b, module)}


def test_same_rc_exchange_same_frames_and_completions(runs: dict[str, dict[str, Any]]) -> None:
    py, nat = runs["python"], runs["native"]
    for r in (py, nat):
        assert r["data_ok"]
        assert len(r["wc_a"]) == 2 * QPS and len(r["wc_b"]) == QPS
        assert all(status == WcStatus.SUCCESS for _, status, _, _ in r["wc_a"] + r["wc_b"])
    assert nat["wc_a"] == py["wc_a"] and nat["wc_b"] == py["wc_b"]
    assert py["wire"]["b"] and py["wire"]["a"]
    assert nat["wire"]["b"] == py["wire"]["b"]            # a -> b: requests (with the go-back after the loss)
    assert nat["wire"]["a"] == py["wire"]["a"]            # b -> a: ACKs and the NAK
    assert sum(decode(f).syndrome is not None and decode(f).syndrome >> 5 == 3 for f in nat["wire"]["a"]) >= 1
    assert nat["counters_b"].malformed_frames == 0 and nat["counters_b"].qp_frames == len(nat["wire"]["b"])


def test_native_nic_keeps_the_receive_lag(runs: dict[str, dict[str, Any]]) -> None:
    assert runs["native"]["rx_lag_events"] > 0
    assert runs["python"]["rx_lag_events"] > 0


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_tshark_reads_the_native_nics_frames(runs: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    frames = runs["native"]["wire"]["b"][:20] + runs["native"]["wire"]["a"][:5]
    write_frames(tmp_path / "nic.pcap", frames)
    out = subprocess.run(["tshark", "-o", "ip.check_checksum:TRUE", "-r", str(tmp_path / "nic.pcap"), "-T", "json"],
                         capture_output=True, text=True, timeout=60, check=True)
    packets = [p["_source"]["layers"] for p in json.loads(out.stdout)]
    assert len(packets) == len(frames)
    for layers, frame in zip(packets, frames, strict=True):
        assert "infiniband" in layers["frame"]["frame.protocols"]
        assert int(layers["infiniband"]["infiniband.invariant.crc"], 16) == int.from_bytes(frame[-4:], "big")
        assert decode(frame).icrc_ok
