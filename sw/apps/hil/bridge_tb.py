"""The bridge testbench (a cocotb module run by ``launch`` in Verilator): ``nic_cc_top`` on a live interface.

Frames the kernel delivers on the interface (AF_PACKET, in the namespace the process runs in) enter ``rx_s_axis``;
frames leaving ``tx_m_axis`` are sent on it (frame boundaries from tlast/tkeep, ``axis_io``).  The host driver
reaches the CSR bus and doorbell over a local control socket (``sw.roce.softnic.rtl_nic_socket``); its ``stats``
name the testbench's process group (``pgid``: what ends it, e.g. a test killing it mid-run).

Time is the one clock (``sw.clock``): the RTL advances in slices of ``slice_clocks`` clocks, each clock 2.5 ns of
network time; after each slice it waits until network time has caught up (it never runs ahead), and records how
far it was behind (``sw.clock.lag``, component ``hil bridge <ifname>``: it serviced that network time late).
For the golden replay of the RTL's congestion control (``sw.apps.hil.rate_replay``) it records, in RTL clocks since
its origin: the first beat of every CNP that enters ``rx_s_axis`` with a valid ICRC (``cnp_cycles``), every
QP_INIT write (``qp_init_cycles``: clock, QP, frames sent so far) and every QP_RATE read the host driver makes
(``rate_reads``: clock, QP, value, frames sent so far); the ``stop`` reply carries them.  With ``cfg["cc"]`` hpcc
also every INT-echo ACK that enters ``rx_s_axis`` (``int_ack_frames``: clock of its first beat, the frame as hex:
the INT records as the fabric wrote them) and every event of the HPCC engine (``hpcc_events``, ``HpccProbe``).
Without an interface (free-running) it sends ``free_frames`` frames of QP 0 to a sink as fast as it can: the
reference the bench compares the bridge's cost against.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import deque
from pathlib import Path
from typing import Any

import cocotb
from cocotb.clock import Clock as SimClock
from cocotb.triggers import ClockCycles, Timer, ValueChange
from cocotb.utils import get_sim_time

from sw.apps.hil.axis_io import AxisCapture, AxisDriver
from sw.apps.hil.cocotb_port import CocotbNicPort, csr_access, ring_doorbell
from sw.apps.hil.model import CLK_NS
from sw.cc.nic_regs import REG_QP_INIT, REG_QP_RATE, REG_QP_SEL
from sw.clock import get_clock
from sw.clock.lag import LagStats, mtu_serialization_ns, register, write_lag_file
from sw.roce import Opcode
from sw.roce.softnic.port import SO_RCVBUFFORCE
from sw.roce.softnic.rtl_nic_socket import OPS
from sw.roce.wire.decode import decode
from sw.roce.wire.errors import RoceFormatError
from sw.roce.wire.int_md import carries_int, strip_int
from sw.units.jsonl_socket import LineFramer, encode_line

ENV_CONFIG = "HIL_CONFIG"
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4


class Window:
    """Cycles and wall time (less the pacing waits) from the first doorbell to the last frame out: the busy
    simulation speed the bench compares between free-running and in the loop."""

    def __init__(self) -> None:
        self.start: tuple[int, float, float] | None = None
        self.end: tuple[int, float, float] | None = None

    def mark(self, cycles: int, slept_s: float, first: bool) -> None:
        point = (cycles, time.perf_counter(), slept_s)
        if first and self.start is None:
            self.start = point
        elif not first and self.start is not None:
            self.end = point

    def figures(self) -> dict[str, Any]:
        if self.start is None or self.end is None:
            return {"window_cycles": 0, "busy_wall_s": 0.0, "cycles_per_s": None}
        cycles = self.end[0] - self.start[0]
        busy = (self.end[1] - self.start[1]) - (self.end[2] - self.start[2])
        return {"window_cycles": cycles, "busy_wall_s": round(busy, 4),
                "cycles_per_s": round(cycles / busy) if busy > 0 else None}


class HpccProbe:
    """The HPCC engine's events as they happen (a change of its trace sequence, the clock of its WRITE state):
    clock, kind (``hw.hpcc.KIND_*``), QP, the rate (kb/s) and window it wrote and, for an ACK, the ``ack_seq`` and
    ``snd_nxt`` the INT-echo feeder paired with it (the engine's ``ack`` payload, held until the engine is done):
    ``snd_nxt`` is the RTL's own count of the QP's frames sent, which no observer outside the NIC sees exactly."""

    def __init__(self, dut, qp_bits: int, clock_of) -> None:
        from hw.hpcc import QP_STATE, ack_layout
        from hw.int_ack import MAX_INT_HOPS

        self.hp, self.clock_of = dut.hpcc, clock_of
        ack = ack_layout(qp_bits, MAX_INT_HOPS, 64, 32)
        self.fields = {name: (QP_STATE[name].offset, QP_STATE[name].width) for name in ("rate_kbps", "window_bytes")}
        self.seq = {name: (ack[name].offset, ack[name].width) for name in ("ack_seq", "snd_nxt")}
        self.events: list[tuple[int, ...]] = []

    @staticmethod
    def _field(raw: int, at: tuple[int, int]) -> int:
        return (raw >> at[0]) & ((1 << at[1]) - 1)

    async def run(self) -> None:
        hp = self.hp
        while True:
            await ValueChange(hp.trace_seq)
            state, ack = int(hp.trace_state.value), int(hp.ack__payload.value)
            self.events.append((self.clock_of(), int(hp.trace_kind.value), int(hp.trace_qp.value),
                                self._field(state, self.fields["rate_kbps"]),
                                self._field(state, self.fields["window_bytes"]),
                                self._field(ack, self.seq["ack_seq"]), self._field(ack, self.seq["snd_nxt"])))


class Bridge:
    """The process's state: the DUT's streams, the interface socket, the control socket, the clocks."""

    def __init__(self, dut, cfg: dict[str, Any]) -> None:
        self.dut, self.cfg = dut, cfg
        self.ifname: str | None = cfg.get("ifname")
        self.slice = int(cfg.get("slice_clocks", 64))
        self.clock = get_clock()
        self.cycle0 = 0
        self.slept_s = 0.0
        self.frames_tx = self.frames_rx = self.frames_host = 0
        self.window = Window()
        self.stopped: dict[str, Any] | None = None
        self.qp_sel = 0
        self.cnp_cycles: list[int] = []
        self.qp_init_cycles: list[tuple[int, int, int]] = []
        self.rate_reads: list[tuple[int, int, int, int]] = []
        self.int_ack_frames: list[tuple[int, str]] = []
        self.hpcc = HpccProbe(dut, int(cfg["qp_bits"]), lambda: self.cycles) if cfg.get("cc") == "hpcc" else None
        self.source = AxisDriver(dut, "rx_s_axis__", int(cfg["data_width"]) // 8, on_start=self.frame_in)
        self.sink = AxisCapture(dut, "tx_m_axis__", int(cfg["data_width"]) // 8)
        self.lag = register(f"hil bridge {self.ifname or 'free'}",
                            LagStats(mtu_serialization_ns(float(cfg.get("rate_bps", 10e9)))))
        self.sock: socket.socket | None = None
        self.ctl: socket.socket | None = None
        self.conns: list[tuple[socket.socket, LineFramer, deque[bytes]]] = []

    def open(self) -> None:
        if self.ifname:
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)
            self.sock.bind((self.ifname, 0))
            self.sock.setblocking(False)
        if self.cfg.get("ctl"):
            path = self.cfg["ctl"]
            Path(path).unlink(missing_ok=True)
            self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.ctl.bind(path + ".tmp")
            self.ctl.listen(4)
            self.ctl.setblocking(False)
            os.replace(path + ".tmp", path)    # the path appears only once it accepts

    @property
    def cycles(self) -> int:
        """RTL clocks since the origin (after reset), CSR accesses included."""
        return int(get_sim_time(unit="ns") / CLK_NS) - self.cycle0

    def frame_in(self, frame: bytes) -> None:
        """A frame's first beat entered ``rx_s_axis``: a CNP (decoded by ``sw.roce``, ICRC valid) records the clock;
        with the HPCC probe an ACK carrying echoed INT records the clock and the frame."""
        if carries_int(frame):
            if self.hpcc is not None:
                try:
                    plain, records = strip_int(frame)
                    if records.echoed and decode(plain).opcode == Opcode.ACKNOWLEDGE:
                        self.int_ack_frames.append((self.cycles, frame.hex()))
                except RoceFormatError:
                    pass
            return
        try:
            if decode(frame).opcode == Opcode.CNP:
                self.cnp_cycles.append(self.cycles)
        except RoceFormatError:
            pass

    # --- one slice of network time ------------------------------------------------------------------------
    def pace(self) -> None:
        """RTL time is ``cycles * 2.5 ns`` since the origin: wait while it is ahead, record it when behind."""
        rtl_ns = int(self.cycles * CLK_NS)
        late_ns = self.clock.now_ns() - self.net0_ns - rtl_ns
        if late_ns < 0:
            t0 = time.perf_counter()
            self.clock.sleep_until_ns(self.net0_ns + rtl_ns)
            self.slept_s += time.perf_counter() - t0
        self.lag.record(max(0, late_ns))

    def pump_frames(self) -> None:
        """Kernel -> rx_s_axis, tx_m_axis -> kernel (or, free-running, tx_m_axis -> nowhere)."""
        while self.sink.frames:
            frame = self.sink.frames.popleft()
            if self.sock is not None:
                self.sock.send(frame)
            self.frames_tx += 1
            self.window.mark(self.cycles, self.slept_s, first=False)
        if self.sock is None:
            return
        while True:
            try:
                data, addr = self.sock.recvfrom(65536)
            except BlockingIOError:
                return
            if addr[2] == PACKET_OUTGOING:       # our own frames, seen on the way out
                continue
            self.source.send(data)
            self.frames_rx += 1

    def requests(self) -> list[tuple[socket.socket, dict[str, Any]]]:
        """New control connections and the complete requests on every connection."""
        if self.ctl is None:
            return []
        while True:
            try:
                conn, _ = self.ctl.accept()
            except BlockingIOError:
                break
            conn.setblocking(False)
            self.conns.append((conn, LineFramer(), deque()))
        out = []
        for conn, framer, _ in list(self.conns):
            try:
                data = conn.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                conn.close()
                self.conns = [c for c in self.conns if c[0] is not conn]
                continue
            for line in framer.feed(data):
                if line.strip():
                    try:
                        out.append((conn, json.loads(line)))
                    except ValueError:
                        out.append((conn, {"op": "(not JSON)"}))
        return out

    async def serve(self, req: dict[str, Any]) -> Any:
        op = req.get("op")
        if op not in OPS:
            raise ValueError(f"unknown op {op!r}; known: {', '.join(OPS)}")
        if op == "read":
            value = await csr_access(self.dut, int(req["addr"]))
            if int(req["addr"]) == REG_QP_RATE:
                self.rate_reads.append((self.cycles, self.qp_sel, value, self.frames_tx))
            return value
        if op == "write":
            addr = int(req["addr"])
            if addr == REG_QP_INIT:
                self.qp_init_cycles.append((self.cycles, self.qp_sel, self.frames_tx))
            value = await csr_access(self.dut, addr, int(req["value"]))
            if addr == REG_QP_SEL:
                self.qp_sel = int(req["value"])
            return value
        if op == "doorbell":
            self.window.mark(self.cycles, self.slept_s, first=True)
            await ring_doorbell(self.dut, int(req["qp"]), int(req["bytes"]), int(self.cfg["qp_bits"]))
            return None
        if op == "stop":
            self.stopped = {**self.figures(), "cnp_cycles": self.cnp_cycles, "qp_init_cycles": self.qp_init_cycles,
                            "rate_reads": self.rate_reads, "int_ack_frames": self.int_ack_frames,
                            "hpcc_events": self.hpcc.events if self.hpcc is not None else []}
            return self.stopped
        return self.figures()

    def figures(self) -> dict[str, Any]:
        return {"ifname": self.ifname, "pgid": os.getpgid(0), "cycles": self.cycles,
                "rtl_ns": int(self.cycles * CLK_NS), "net_ns": self.clock.now_ns() - self.net0_ns,
                "slept_s": round(self.slept_s, 4),
                "time_dilation": self.clock.dilation, "frames_tx": self.frames_tx, "frames_rx": self.frames_rx,
                "lag": self.lag.summary(), **self.window.figures()}

    async def run(self) -> dict[str, Any]:
        dut = self.dut
        for sig in (dut.csr_we, dut.csr_re, dut.csr_addr, dut.csr_wdata, dut.doorbell__valid):
            sig.value = 0
        dut.rx_m_axis__tready.value = 1
        dut.cnp_req__ready.value = 1
        dut.rst.value = 1
        await ClockCycles(dut.clk, 3)
        dut.rst.value = 0
        await ClockCycles(dut.clk, int(self.cfg["n_qps"]) + 4)   # the memories' clearing pass
        cocotb.start_soon(self.sink.run())
        cocotb.start_soon(self.source.run())
        if self.hpcc is not None:
            cocotb.start_soon(self.hpcc.run())
        self.open()
        self.cycle0 = int(get_sim_time(unit="ns") / CLK_NS)
        self.net0_ns = self.clock.now_ns()
        if self.ifname is None and self.ctl is None:
            await self.free_run(int(self.cfg["free_frames"]))
            return self.figures()
        while self.stopped is None:
            await Timer(self.slice * CLK_NS, unit="ns")
            if self.ifname is not None:
                self.pace()
            self.pump_frames()
            for conn, req in self.requests():
                try:
                    reply = {"value": await self.serve(req)}
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    reply = {"error": f"{type(exc).__name__}: {exc}"}
                conn.setblocking(True)
                conn.sendall(encode_line(reply))
                conn.setblocking(False)
        return self.stopped

    async def free_run(self, n_frames: int) -> None:
        """The reference: QP 0 configured by the host driver inside the simulation, ``n_frames`` MTU frames at
        line rate into a sink, no interface, no control socket, no pacing."""
        from sw.apps.hil.traffic import configure_qp, frame_bytes
        from sw.roce.softnic.rtl_nic_driver import RtlNicDriver

        nic = RtlNicDriver(CocotbNicPort(self.dut, int(self.cfg["qp_bits"])))
        await configure_qp(nic, 0, self.cfg)
        self.window.mark(self.cycles, 0.0, first=True)
        for n in frame_bytes(n_frames, int(self.cfg["mtu_bytes"])):
            await nic.ring(0, n)
        while self.frames_tx < n_frames:
            await Timer(self.slice * CLK_NS, unit="ns")
            self.pump_frames()


@cocotb.test()
async def bridge(dut) -> None:
    """Run the bridge until the host driver says ``stop`` (or, free-running, until its frames are out)."""
    cfg = json.loads(os.environ[ENV_CONFIG])
    SimClock(dut.clk, CLK_NS, unit="ns").start()
    br = Bridge(dut, cfg)
    out = await br.run()
    Path(cfg["results"]).write_text(json.dumps(out, indent=1))
    write_lag_file()
