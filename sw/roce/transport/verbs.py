"""Verbs objects with the names RDMA programmers know: PD, MR over numpy buffers, CQ, work requests and
completions.  The device and its QPs are ``sw.roce.softnic.nic.Nic`` (``sw.roce.softnic.port.open_device``) and
``sw.roce.transport.qp.QueuePair``; ``import sw.roce`` gives every verbs name in one place (``help(sw.roce)``), and
``examples/rdma_write_read.py`` is a complete two-host program.

Memory regions get a virtual address range and lkey/rkey like a real HCA's; the transport looks them up by key
and checks bounds and access flags on every local and remote access.  A work request carries one SGE or a list
of them (``sge=[...]``, at most the QP's ``QpCap.max_send_sge`` / ``max_recv_sge``): sends and writes gather
from them in order, receives and reads scatter into them in order (``sw.roce.transport.sgl``).
Atomics (compare-and-swap,
fetch-and-add) work on 8 aligned bytes of a remote MR registered with REMOTE_ATOMIC and return the original
value into an 8-byte local SGE.  ``query_device`` gives the device limits (ibv_query_device names), among them
how many RDMA READ / atomic requests a QP may keep outstanding (``max_qp_init_rd_atom``) and serve
(``max_qp_rd_atom``); ``SendWr.fence`` holds a request until every earlier READ / atomic has completed.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum, IntFlag

import numpy as np


class VerbsError(ValueError):
    """A verbs call with bad arguments (unknown key, out of bounds, wrong QP state): one clear line."""

    is_user_error = True


class Access(IntFlag):
    """Memory-region access flags (ibv_access_flags)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8


ACCESS_ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ


class WrOpcode(IntEnum):
    """Send-queue work-request opcodes (ibv_wr_opcode)."""

    RDMA_WRITE = 0
    RDMA_WRITE_WITH_IMM = 1
    SEND = 2
    SEND_WITH_IMM = 3
    RDMA_READ = 4
    ATOMIC_CMP_AND_SWP = 5
    ATOMIC_FETCH_AND_ADD = 6


ATOMIC_WR_OPCODES = frozenset({WrOpcode.ATOMIC_CMP_AND_SWP, WrOpcode.ATOMIC_FETCH_AND_ADD})
ATOMIC_BYTES = 8  # every IBTA atomic works on one naturally aligned 64-bit word


class WcOpcode(IntEnum):
    """What a completion reports (ibv_wc_opcode)."""

    SEND = 0
    RDMA_WRITE = 1
    RDMA_READ = 2
    COMP_SWAP = 3
    FETCH_ADD = 4
    RECV = 128
    RECV_RDMA_WITH_IMM = 129


class WcStatus(IntEnum):
    """Completion status (ibv_wc_status), the subset an RC transport produces."""

    SUCCESS = 0
    LOC_LEN_ERR = 1
    LOC_PROT_ERR = 4
    WR_FLUSH_ERR = 5
    REM_INV_REQ_ERR = 9
    REM_ACCESS_ERR = 10
    REM_OP_ERR = 11
    RETRY_EXC_ERR = 12
    RNR_RETRY_EXC_ERR = 13


_WC_OF_WR = {
    WrOpcode.RDMA_WRITE: WcOpcode.RDMA_WRITE,
    WrOpcode.RDMA_WRITE_WITH_IMM: WcOpcode.RDMA_WRITE,
    WrOpcode.SEND: WcOpcode.SEND,
    WrOpcode.SEND_WITH_IMM: WcOpcode.SEND,
    WrOpcode.RDMA_READ: WcOpcode.RDMA_READ,
    WrOpcode.ATOMIC_CMP_AND_SWP: WcOpcode.COMP_SWAP,
    WrOpcode.ATOMIC_FETCH_AND_ADD: WcOpcode.FETCH_ADD,
}


def wc_opcode_of(opcode: WrOpcode) -> WcOpcode:
    return _WC_OF_WR[opcode]


@dataclass(frozen=True, slots=True)
class Sge:
    """One scatter/gather element: ``length`` bytes at virtual address ``addr`` of the MR with ``lkey``."""

    addr: int
    length: int
    lkey: int


def _sg_tuple(sge: Sge | Sequence[Sge]) -> tuple[Sge, ...]:
    return (sge,) if isinstance(sge, Sge) else tuple(sge)


class _ScatterGather:
    """What a send and a receive work request share: ``sge`` given as one Sge or a sequence (kept as the Sge or a
    tuple), and its elements as a tuple (``sg_list``)."""

    __slots__ = ()
    sge: Sge | tuple[Sge, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.sge, Sge):
            object.__setattr__(self, "sge", _sg_tuple(self.sge))

    @property
    def sg_list(self) -> tuple[Sge, ...]:
        """The scatter/gather elements as a tuple (one or more)."""
        return _sg_tuple(self.sge)


@dataclass(frozen=True, slots=True)
class SendWr(_ScatterGather):
    """A send-queue work request; ``remote_addr``/``rkey`` for RDMA and atomics, ``imm_data`` for *_WITH_IMM.

    ``sge`` is one Sge or a list of them (ibv_send_wr.sg_list).  Atomics: ``compare_add`` is the compare value
    of CMP_AND_SWP or the addend of FETCH_AND_ADD, ``swap`` the value CMP_AND_SWP writes on a match.
    """

    wr_id: int
    opcode: WrOpcode
    sge: Sge | tuple[Sge, ...]
    remote_addr: int = 0
    rkey: int = 0
    imm_data: int | None = None
    signaled: bool = True
    compare_add: int = 0
    swap: int = 0
    fence: bool = False  # IBV_SEND_FENCE: wait until every earlier RDMA READ / atomic of this QP has completed


@dataclass(frozen=True, slots=True)
class RecvWr(_ScatterGather):
    """A receive-queue work request: where the next incoming SEND lands (one Sge or a list, filled in order)."""

    wr_id: int
    sge: Sge | tuple[Sge, ...]


MAX_SGE = 30  # device limit (ibv_device_attr.max_sge of a ConnectX-class HCA)
DEFAULT_MAX_SGE = 16
MAX_QP_RD_ATOM = 16  # RDMA READ / atomic requests one QP can serve at once (responder resources, IRD)
MAX_QP_INIT_RD_ATOM = 16  # RDMA READ / atomic requests one QP can have outstanding (initiator depth, ORD)


@dataclass(frozen=True)
class DeviceAttr:
    """The device limits a verbs application reads with ibv_query_device (the subset this NIC enforces)."""

    max_sge: int = MAX_SGE
    max_qp_rd_atom: int = MAX_QP_RD_ATOM
    max_qp_init_rd_atom: int = MAX_QP_INIT_RD_ATOM


def query_device() -> DeviceAttr:
    """ibv_query_device: every software NIC of this stack has the same limits."""
    return DeviceAttr()


@dataclass(frozen=True)
class QpCap:
    """Per-QP capabilities fixed at create_qp (ibv_qp_cap): SGEs per send / receive work request."""

    max_send_sge: int = DEFAULT_MAX_SGE
    max_recv_sge: int = DEFAULT_MAX_SGE

    def __post_init__(self) -> None:
        for name in ("max_send_sge", "max_recv_sge"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= MAX_SGE:
                raise VerbsError(f"create_qp cap {name}={value!r}: must be 1..{MAX_SGE}")


@dataclass(frozen=True, slots=True)
class WorkCompletion:
    """One completion-queue entry (ibv_wc)."""

    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qp_num: int
    byte_len: int = 0
    imm_data: int | None = None


_key_counter = itertools.count(0x1000)
_VA_BASE = 0x7F00_0000_0000
_VA_ALIGN = 1 << 21


class MemoryRegion:
    """A registered numpy buffer: bytes ``[addr, addr + length)`` of a virtual address space, lkey, rkey."""

    def __init__(self, pd: ProtectionDomain, buf: np.ndarray, access: Access, addr: int) -> None:
        if not isinstance(buf, np.ndarray) or not buf.flags.c_contiguous:
            raise VerbsError("reg_mr: the buffer must be a C-contiguous numpy array")
        self.pd = pd
        self.buf = buf
        self.view = memoryview(buf).cast("B")  # byte view the transport copies into and out of
        self.length = len(self.view)
        self.access = Access(access)
        self.addr = addr
        self.lkey = next(_key_counter)
        self.rkey = next(_key_counter)
        self.registered = True  # dereg_mr clears it: work requests that still name this MR fail at DMA time

    def offset(self, addr: int, length: int, need: Access, *, what: str = "access") -> int:
        """Offset of ``[addr, addr+length)`` in the buffer, or VerbsError if out of bounds or not allowed."""
        if need and not self.access & need:
            raise VerbsError(f"{what}: MR {self.lkey:#x} lacks access {need!r}")
        off = addr - self.addr
        if off < 0 or length < 0 or off + length > self.length:
            raise VerbsError(f"{what}: [{addr:#x}, +{length}) is outside MR [{self.addr:#x}, +{self.length})")
        return off

    def sge(self, offset: int = 0, length: int | None = None) -> Sge:
        """An SGE over part of this region (default: all of it)."""
        n = self.length - offset if length is None else length
        self.offset(self.addr + offset, n, Access(0), what="sge")
        return Sge(self.addr + offset, n, self.lkey)


class ProtectionDomain:
    """Groups memory regions and QPs; keys are looked up only within their PD."""

    def __init__(self) -> None:
        self._by_lkey: dict[int, MemoryRegion] = {}
        self._by_rkey: dict[int, MemoryRegion] = {}
        self._next_va = _VA_BASE

    def reg_mr(self, buf: np.ndarray, access: Access = ACCESS_ALL) -> MemoryRegion:
        """Register ``buf`` (contiguous numpy array of any dtype) with ``access`` flags."""
        mr = MemoryRegion(self, buf, access, self._next_va)
        self._next_va += (mr.length + _VA_ALIGN) // _VA_ALIGN * _VA_ALIGN + _VA_ALIGN
        self._by_lkey[mr.lkey] = mr
        self._by_rkey[mr.rkey] = mr
        return mr

    def dereg_mr(self, mr: MemoryRegion) -> None:
        """ibv_dereg_mr: its keys stop working (work requests still naming it fail with a protection error)."""
        mr.registered = False
        self._by_lkey.pop(mr.lkey, None)
        self._by_rkey.pop(mr.rkey, None)

    def by_lkey(self, lkey: int) -> MemoryRegion | None:
        """The registered MR with local key ``lkey``, or None."""
        return self._by_lkey.get(lkey)

    def by_rkey(self, rkey: int) -> MemoryRegion | None:
        """The registered MR with remote key ``rkey``, or None."""
        return self._by_rkey.get(rkey)


class CompletionQueue:
    """Completions in the order the transport produced them; ``poll`` takes up to ``max_entries``.

    The NIC is software: completions appear only while its engine runs (``Nic.poll()`` / ``Nic.run_until``),
    so a program polls the CQ and progresses the NIC in one loop, as a busy-polling verbs application does.
    ``len(cq)`` is the number of completions waiting; completions beyond ``depth`` are dropped and counted in
    ``overflows``."""

    def __init__(self, depth: int = 1 << 16) -> None:
        self.depth = depth
        self._entries: deque[WorkCompletion] = deque()
        self.overflows = 0

    def push(self, wc: WorkCompletion) -> None:
        """Add a completion (the transport's side)."""
        if len(self._entries) >= self.depth:
            self.overflows += 1
            return
        self._entries.append(wc)

    def poll(self, max_entries: int = 16) -> list[WorkCompletion]:
        """ibv_poll_cq: take up to ``max_entries`` completions, oldest first (an empty list if none)."""
        out = []
        while self._entries and len(out) < max_entries:
            out.append(self._entries.popleft())
        return out

    def __len__(self) -> int:
        return len(self._entries)
