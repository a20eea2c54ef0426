"""perftest-style measurements over the software RoCE NIC: a server that exposes a buffer and a client that
runs WRITE / READ / SEND bandwidth and latency per message size, verifying the data after each size, or
ATOMIC (fetch-and-add of 1 on the server's first 64-bit word, like ib_atomic_bw/lat: ops/s and latency; the
word must end up incremented exactly once per operation).

Both ends rendezvous through a FileStore; the client drives the requests (as ib_write_bw's client does) and
asks the server for a CRC of what arrived through the store.  All times are network time (sw.clock).
``rd_atomic`` is perftest's ``--outs``: both ends ask for that many outstanding READs / atomics (max_rd_atomic)
and offer as many responder resources (max_dest_rd_atomic); connect() negotiates the minimum.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sw.clock import Clock, get_clock
from sw.roce.softnic.nic import SoftNic
from sw.roce.transport.qp_connect import connect, exchange, qp_info, random_psn
from sw.roce.transport.verbs import (
    ACCESS_ALL,
    ATOMIC_BYTES,
    MAX_QP_INIT_RD_ATOM,
    Access,
    CompletionQueue,
    RecvWr,
    SendWr,
    WcOpcode,
    WcStatus,
    WrOpcode,
)
from sw.units.file_store import FileStore

OPS = {
    "write": WrOpcode.RDMA_WRITE,
    "read": WrOpcode.RDMA_READ,
    "send": WrOpcode.SEND,
    "atomic": WrOpcode.ATOMIC_FETCH_AND_ADD,
}
ATOMIC_ADD = 1
SERVER_SEED = 0x5EED
CLIENT_SEED = 0xC11E
RECV_DEPTH = 256
CONNECT_TIMEOUT_NS = 30 * 10**9


class PerfError(RuntimeError):
    """The measurement could not run: a peer that never answered, a failed completion, a timeout."""

    is_user_error = True


@dataclass
class PerfConfig:
    """What the client measures."""

    op: str = "write"
    sizes: list[int] = field(default_factory=lambda: [4096])
    iters: int = 1000
    budget_bytes: int = 16 << 20  # per size: iterations are capped to move about this much data
    lat_iters: int = 0
    tx_depth: int = 64
    path_mtu: int = 4096
    timeout_ns: int = 120 * 10**9
    qp_timeout: int = 13  # 4.096 us * 2^13 = 33.5 ms local ACK timeout
    rd_atomic: int = MAX_QP_INIT_RD_ATOM  # READs / atomics outstanding (and responder resources offered)


def pattern(n: int, seed: int) -> np.ndarray:
    """Deterministic test data both ends can regenerate."""
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def crc32(buf: np.ndarray, n: int) -> int:
    return zlib.crc32(memoryview(buf)[:n])


def first_u64(buf: np.ndarray) -> int:
    """The buffer's first 64-bit word in host order (the word perf's atomics add to)."""
    return int.from_bytes(memoryview(buf)[:ATOMIC_BYTES], sys.byteorder) if len(buf) >= ATOMIC_BYTES else 0


def _port_counters(nic: SoftNic) -> dict[str, int]:
    """Frames the OS refused or dropped, or the port skipped (an AF_PACKET port has them; an in-memory one has
    none)."""
    poll = getattr(nic.port, "poll_kernel_drops", None)
    if poll is not None:
        poll()
    counters = getattr(nic.port, "counters", None)
    return dict(vars(counters)) if counters is not None else {}


def _session(nic: SoftNic, buf_bytes: int, seed: int) -> tuple[Any, CompletionQueue, Any, Any, np.ndarray]:
    pd = nic.alloc_pd()
    cq = nic.create_cq()
    qp = nic.create_qp(pd, cq)
    buf = pattern(max(buf_bytes, ATOMIC_BYTES), seed)
    mr = pd.reg_mr(buf, ACCESS_ALL | Access.REMOTE_ATOMIC)
    return pd, cq, qp, mr, buf


def run_server(
    nic: SoftNic,
    store: FileStore,
    name: str,
    *,
    max_size: int,
    path_mtu: int,
    qp_timeout: int = 13,
    idle_timeout_ns: int = 300 * 10**9,
    rd_atomic: int = MAX_QP_INIT_RD_ATOM,
) -> dict[str, Any]:
    """Serve one client until it says bye: answer RDMA, keep receives posted, report CRCs on request."""
    clock = nic.clock
    _, cq, qp, mr, buf = _session(nic, max_size, SERVER_SEED)
    psn = random_psn()
    limits = {"max_rd_atomic": rd_atomic, "max_dest_rd_atomic": rd_atomic}
    info = qp_info(qp, psn, mr, **limits) | {"path_mtu": path_mtu, "seed": SERVER_SEED}
    remote = exchange(store, f"{name}.server", f"{name}.client", info, CONNECT_TIMEOUT_NS)
    connect(qp, psn, remote, path_mtu=min(path_mtu, int(remote["path_mtu"])), timeout=qp_timeout, **limits)
    recv_wr = RecvWr(0, mr.sge())
    for _ in range(RECV_DEPTH):
        qp.post_recv(recv_wr)
    store.set(f"{name}.server-ready", {"qp_num": qp.qp_num})
    k = 0
    last_len = 0
    next_check_ns = 0
    end_ns = clock.now_ns() + idle_timeout_ns
    while clock.now_ns() < end_ns:
        nic.poll(2_000_000)
        for wc in cq.poll(64):
            if wc.status == WcStatus.SUCCESS:
                last_len = wc.byte_len
                qp.post_recv(recv_wr)
        now_ns = clock.now_ns()
        if now_ns < next_check_ns:
            continue
        next_check_ns = now_ns + int(clock.net_duration_ns(20_000_000))
        req = store.get(f"{name}.req.{k}")
        if req is None:
            continue
        end_ns = now_ns + idle_timeout_ns
        if req["cmd"] == "bye":
            final = {
                "counters": nic.qp_counters(),
                "nic_counters": vars(nic.counters),
                "port_counters": _port_counters(nic),
            }
            store.set(f"{name}.resp.{k}", final)
            return final
        n = int(req.get("len", last_len))
        store.set(
            f"{name}.resp.{k}",
            {"crc32": crc32(buf, n), "len": n, "u64": first_u64(buf), "counters": nic.qp_counters()},
        )
        k += 1
    raise PerfError(f"server {name}: no request from the client for {idle_timeout_ns / 1e9:g} s")


class PerfClient:
    """The active side: connects, runs each size, verifies it, and says bye."""

    def __init__(self, nic: SoftNic, store: FileStore, name: str, cfg: PerfConfig) -> None:
        self.nic, self.store, self.name, self.cfg = nic, store, name, cfg
        self.clock: Clock = nic.clock or get_clock()
        max_size = max(cfg.sizes)
        _, self.cq, self.qp, self.mr, self.buf = _session(nic, max_size, CLIENT_SEED)
        psn = random_psn(random.Random())
        limits = {"max_rd_atomic": cfg.rd_atomic, "max_dest_rd_atomic": cfg.rd_atomic}
        info = qp_info(self.qp, psn, self.mr, **limits) | {"path_mtu": cfg.path_mtu}
        self.remote = exchange(store, f"{name}.client", f"{name}.server", info, CONNECT_TIMEOUT_NS)
        if int(self.remote["length"]) < max_size:
            raise PerfError(f"server buffer of {self.remote['length']} bytes is smaller than size {max_size}")
        self.path_mtu = min(cfg.path_mtu, int(self.remote["path_mtu"]))
        connect(self.qp, psn, self.remote, path_mtu=self.path_mtu, timeout=cfg.qp_timeout, **limits)
        store.wait(f"{name}.server-ready", CONNECT_TIMEOUT_NS)
        self.server_data = pattern(max(max_size, ATOMIC_BYTES), int(self.remote["seed"]))
        self.atomic_ops = 0  # fetch-and-adds completed so far: the server's word must have grown by exactly this
        self._k = 0
        self._server_retx = 0

    def _ask(self, req: dict[str, Any]) -> dict[str, Any]:
        self.store.set(f"{self.name}.req.{self._k}", req)
        resp = self.store.wait(f"{self.name}.resp.{self._k}", CONNECT_TIMEOUT_NS)
        self._k += 1
        return resp

    def _wr(self, size: int, wr_id: int) -> SendWr:
        op = OPS[self.cfg.op]
        if op == WrOpcode.ATOMIC_FETCH_AND_ADD:
            return SendWr(
                wr_id,
                op,
                self.mr.sge(0, ATOMIC_BYTES),
                remote_addr=int(self.remote["addr"]),
                rkey=int(self.remote["rkey"]),
                compare_add=ATOMIC_ADD,
            )
        return SendWr(
            wr_id,
            op,
            self.mr.sge(0, size),
            remote_addr=int(self.remote["addr"]),
            rkey=int(self.remote["rkey"]),
        )

    def _drive(self, size: int, iters: int, depth: int, on_done: Callable[[int], None] | None = None) -> int:
        """Post ``iters`` WRs of ``size`` with ``depth`` outstanding; returns the elapsed network ns."""
        nic, cq, qp, clock = self.nic, self.cq, self.qp, self.clock
        wr = self._wr(size, size)
        posted = done = 0
        start_ns = clock.now_ns()
        end_ns = start_ns + self.cfg.timeout_ns
        while done < iters:
            while posted < iters and posted - done < depth:
                qp.post_send(wr)
                posted += 1
            nic.poll(1_000_000)
            for wc in cq.poll(64):
                if wc.status != WcStatus.SUCCESS:
                    raise PerfError(f"{self.cfg.op} of {size} bytes completed with {wc.status.name}")
                done += 1
                if wc.opcode == WcOpcode.FETCH_ADD:
                    self.atomic_ops += 1
                if on_done is not None:
                    on_done(clock.now_ns())
            if clock.now_ns() > end_ns:
                raise PerfError(
                    f"{self.cfg.op} of {size} bytes: {done}/{iters} done after "
                    f"{self.cfg.timeout_ns / 1e9:g} s"
                )
        return clock.now_ns() - start_ns

    def _verify(self, size: int) -> tuple[bool, int]:
        """Did the data arrive exactly? Also returns the server's retransmission counter."""
        resp = self._ask({"cmd": "crc", "len": size})
        server_retx = int(resp["counters"]["retransmitted_packets"])
        if self.cfg.op == "atomic":
            start = first_u64(self.server_data)
            mask = (1 << 64) - 1
            server_ok = int(resp["u64"]) == (start + ATOMIC_ADD * self.atomic_ops) & mask
            # Completions come in order, so the local word holds what the last fetch-and-add saw.
            local_ok = first_u64(self.buf) == (start + ATOMIC_ADD * (self.atomic_ops - 1)) & mask
            return server_ok and local_ok, server_retx
        if self.cfg.op == "read":
            return bool(np.array_equal(self.buf[:size], self.server_data[:size])), server_retx
        return int(resp["crc32"]) == crc32(self.buf, size) and int(resp["len"]) == size, server_retx

    def run_size(self, size: int) -> dict[str, Any]:
        cfg = self.cfg
        if cfg.op == "atomic":
            size = ATOMIC_BYTES
            iters = max(1, cfg.iters)  # tiny operations: the data budget does not cap them
        else:
            iters = max(1, min(cfg.iters, cfg.budget_bytes // max(size, 1)))
        before = self.nic.qp_counters()
        server_before = self._server_retx
        frames_before = self.nic.counters.tx_frames + self.nic.counters.rx_frames
        cpu0 = time.process_time()
        elapsed_ns = self._drive(size, iters, cfg.tx_depth)
        cpu_s = time.process_time() - cpu0
        frames = self.nic.counters.tx_frames + self.nic.counters.rx_frames - frames_before
        ok, self._server_retx = self._verify(size)
        lat_us: list[float] = []
        if cfg.lat_iters:
            stamps: list[int] = []
            for _ in range(cfg.lat_iters):
                t0 = self.clock.now_ns()
                self._drive(size, 1, 1, on_done=stamps.append)
                lat_us.append((stamps[-1] - t0) / 1e3)
        after = self.nic.qp_counters()
        row: dict[str, Any] = {
            "op": cfg.op,
            "size_bytes": size,
            "iters": iters,
            "elapsed_s": elapsed_ns / 1e9,
            "bw_bps": size * iters * 8 * 10**9 / max(elapsed_ns, 1),
            "msg_rate": iters * 10**9 / max(elapsed_ns, 1),
            "retransmissions": after["retransmitted_packets"]
            - before["retransmitted_packets"]
            + self._server_retx
            - server_before,
            "timeouts": after["timeouts"] - before["timeouts"],
            "frames": frames,
            "pps_per_core": frames / cpu_s if cpu_s > 0 else None,
            "data_ok": ok,
        }
        if cfg.op == "atomic":
            row["atomic_ops_per_s"] = row["msg_rate"]
        if lat_us:
            row["lat_us_median"] = statistics.median(lat_us)
            row["lat_us_p99"] = sorted(lat_us)[min(len(lat_us) - 1, int(0.99 * len(lat_us)))]
        return row

    def run(self) -> dict[str, Any]:
        rows = [self.run_size(size) for size in self.cfg.sizes]
        server = self._ask({"cmd": "bye"})
        return {
            "op": self.cfg.op,
            "path_mtu": self.path_mtu,
            "max_rd_atomic": self.qp.attr.max_rd_atomic,  # negotiated initiator depth
            "tx_depth": self.cfg.tx_depth,
            "cc": self.nic.cc_name,
            "line_rate_bps": self.nic.line_rate_bps,
            "results": rows,
            "client_counters": self.nic.qp_counters(),
            "server_counters": server["counters"],
            "server_nic_counters": server["nic_counters"],
            "server_port_counters": server["port_counters"],
            "nic_counters": vars(self.nic.counters),
            "port_counters": _port_counters(self.nic),
        }
