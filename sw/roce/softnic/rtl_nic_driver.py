"""Host driver of the RTL NIC (``nic_cc_top``) over an abstract register-access port: CC mode and parameters, per-QP
header templates, rates and QP_INIT, doorbells, counters and QP_RATE read-back.

The register map is ``sw.cc.nic_regs`` (the one definition ``hw.csr``/``hw.nic_top`` build from).  The port is
async (``NicPort``): a cocotb testbench implements it on the simulated bus, a socket bridge on a running
testbench.  Templates are the host stack's own (``sw.roce.wire.template``): the first 54 bytes of a frame its
``PacketTemplate`` builds, whose BTH PSN is the QP's next PSN.
"""

from __future__ import annotations

import struct
from typing import Protocol

from sw.cc.nic_regs import (
    CC_MODES,
    COUNTER_ADDR,
    CSR_ID,
    ERR_CLAMP,
    ERR_QP,
    ERR_VALUE,
    PARAM_ADDR,
    REG_ERR,
    REG_ID,
    REG_QP_INIT,
    REG_QP_RATE,
    REG_QP_SEL,
    REG_TMPL0,
    REG_TMPL_WR,
    TEMPLATE_BYTES,
)


class RtlNicError(Exception):
    """The NIC rejected a register write (the ERR flags say why) or is not the NIC this driver knows."""

    is_user_error = True


class NicPort(Protocol):
    """Register access to one ``nic_cc_top``: a CSR word read or write, and the doorbell stream."""

    async def read(self, addr: int) -> int: ...

    async def write(self, addr: int, value: int) -> None: ...

    async def doorbell(self, qp: int, n_bytes: int) -> None: ...


class RtlNicDriver:
    """One RTL NIC behind ``port``: every method is one or a few register accesses (module docstring)."""

    def __init__(self, port: NicPort) -> None:
        self.port = port

    async def check_id(self) -> None:
        """Raise unless the ID register reads the NIC's magic."""
        got = await self.port.read(REG_ID)
        if got != CSR_ID:
            raise RtlNicError(f"NIC ID register reads {got:#010x}, expected {CSR_ID:#010x}")

    async def _checked(self, what: str, addr: int, value: int) -> int:
        """Write, then read and clear ERR; raise on a rejected write; return the ERR_CLAMP flag (0 or set)."""
        await self.port.write(addr, value)
        err = await self.port.read(REG_ERR)
        if err:
            await self.port.write(REG_ERR, err)
        if err & (ERR_VALUE | ERR_QP):
            raise RtlNicError(f"NIC rejected {what} = {value} (ERR {err:#x})")
        return err & ERR_CLAMP

    async def select(self, qp: int) -> None:
        await self._checked("QP_SEL", REG_QP_SEL, qp)

    async def set_param(self, name: str, value: int) -> int:
        """Write parameter ``name``; returns the value the NIC holds (clamped into its range if it was outside)."""
        if name not in PARAM_ADDR:
            raise RtlNicError(f"unknown NIC parameter {name!r}; known: {', '.join(PARAM_ADDR)}")
        clamped = await self._checked(name, PARAM_ADDR[name], value)
        return await self.port.read(PARAM_ADDR[name]) if clamped else value

    async def param(self, name: str) -> int:
        return await self.port.read(PARAM_ADDR[name])

    async def set_cc_mode(self, mode: str) -> None:
        """``none``, ``dcqcn`` or ``hpcc``; write QP_INIT for each QP after a switch (hw.nic_top)."""
        if mode not in CC_MODES:
            raise RtlNicError(f"cc mode {mode!r}: allowed {', '.join(CC_MODES)}")
        await self.set_param("cc_mode", CC_MODES[mode])

    async def write_template(self, qp: int, header: bytes) -> None:
        """QP ``qp``'s 54-byte Ethernet/IPv4/UDP/BTH header template; its BTH PSN is the QP's next PSN."""
        if len(header) != TEMPLATE_BYTES:
            raise RtlNicError(f"template of QP {qp}: {len(header)} bytes, the NIC takes {TEMPLATE_BYTES}")
        await self.select(qp)
        for k, (word,) in enumerate(struct.iter_unpack(">I", header + bytes(-len(header) % 4))):
            await self.port.write(REG_TMPL0 + k, word)
        await self.port.write(REG_TMPL_WR, 0)

    async def set_rate(self, qp: int, rate_reg: int) -> bool:
        """QP ``qp``'s limiter increment (bytes/clock x 2^24, ``sw.cc.RateToIncrement``); True if clamped to line."""
        await self.select(qp)
        return bool(await self._checked(f"QP_RATE of QP {qp}", REG_QP_RATE, rate_reg))

    async def qp_rate(self, qp: int) -> int:
        """QP ``qp``'s current limiter increment (CSR or CC engine, whichever wrote last)."""
        await self.select(qp)
        return await self.port.read(REG_QP_RATE)

    async def qp_init(self, qp: int) -> None:
        """Start QP ``qp``'s CC state afresh in the current mode (hw.nic_top: QP_INIT)."""
        await self.select(qp)
        await self.port.write(REG_QP_INIT, 0)

    async def ring(self, qp: int, n_bytes: int) -> None:
        """Queue ``n_bytes`` of payload for QP ``qp`` (a multiple of 4: the template's pad count is 0)."""
        if n_bytes <= 0 or n_bytes % 4:
            raise RtlNicError(f"doorbell of QP {qp}: {n_bytes} bytes, must be a positive multiple of 4")
        await self.port.doorbell(qp, n_bytes)

    async def counters(self, names: tuple[str, ...] = tuple(COUNTER_ADDR)) -> dict[str, int]:
        """The named 32-bit counters (default all), by name."""
        return {name: await self.port.read(COUNTER_ADDR[name]) for name in names}
