"""AXI-Stream frames in and out of a cocotb DUT at one signal read per beat, idle streams costing nothing.

cocotbext-axi reads every byte lane of a beat through the simulator interface (192 reads per 512-bit beat with
tkeep and tuser) and wakes every clock; the bridge's simulation speed is its bottleneck.  ``AxisCapture`` sleeps
until ``tvalid`` rises, then reads ``tdata``/``tkeep``/``tlast`` once per beat (``tready`` held 1); ``AxisDriver``
sends queued frames beat by beat and sleeps while its queue is empty.  Values are read in the ReadOnly phase: the
beat that the next rising edge transfers."""

from __future__ import annotations

from collections import deque

from cocotb.triggers import Event, ReadOnly, RisingEdge


class AxisCapture:
    """Frames leaving the DUT on ``<prefix>t*`` (tready tied to 1), appended to ``frames`` as bytes."""

    def __init__(self, dut, prefix: str, data_bytes: int) -> None:
        self.clk, self.n = dut.clk, data_bytes
        self.tdata, self.tkeep = getattr(dut, f"{prefix}tdata"), getattr(dut, f"{prefix}tkeep")
        self.tlast, self.tvalid = getattr(dut, f"{prefix}tlast"), getattr(dut, f"{prefix}tvalid")
        getattr(dut, f"{prefix}tready").value = 1
        self.frames: deque[bytes] = deque()

    async def run(self) -> None:
        buf = bytearray()
        await RisingEdge(self.clk)
        await ReadOnly()
        while True:
            if not int(self.tvalid.value):
                await RisingEdge(self.tvalid)
                await ReadOnly()
            keep = int(self.tkeep.value)
            buf += int(self.tdata.value).to_bytes(self.n, "little")[:keep.bit_count()]
            if int(self.tlast.value):
                self.frames.append(bytes(buf))
                buf = bytearray()
            await RisingEdge(self.clk)
            await ReadOnly()


class AxisDriver:
    """Frames into the DUT on ``<prefix>t*``: ``send(frame)`` queues one; ``run`` drives them beat by beat;
    ``on_start(frame)``, when given, is called as a frame's first beat is taken (at that clock edge)."""

    def __init__(self, dut, prefix: str, data_bytes: int, on_start=None) -> None:
        self.clk, self.n = dut.clk, data_bytes
        self.tdata, self.tkeep = getattr(dut, f"{prefix}tdata"), getattr(dut, f"{prefix}tkeep")
        self.tlast, self.tvalid = getattr(dut, f"{prefix}tlast"), getattr(dut, f"{prefix}tvalid")
        self.tready = getattr(dut, f"{prefix}tready")
        self.tvalid.value = 0
        self.queue: deque[bytes] = deque()
        self.wake = Event()
        self.on_start = on_start

    def send(self, frame: bytes) -> None:
        self.queue.append(frame)
        self.wake.set()

    async def run(self) -> None:
        while True:
            if not self.queue:
                self.wake.clear()
                await self.wake.wait()
                await RisingEdge(self.clk)      # start driving just after an edge
            frame = self.queue.popleft()
            for off in range(0, len(frame), self.n):
                beat = frame[off:off + self.n]
                self.tdata.value = int.from_bytes(beat, "little")
                self.tkeep.value = (1 << len(beat)) - 1
                self.tlast.value = int(off + self.n >= len(frame))
                self.tvalid.value = 1
                while True:
                    await ReadOnly()
                    ready = int(self.tready.value)
                    await RisingEdge(self.clk)
                    if ready:
                        break
                if off == 0 and self.on_start is not None:
                    self.on_start(frame)
            self.tvalid.value = 0
