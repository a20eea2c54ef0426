"""Inside a cocotb testbench: the CSR bus and doorbell stream of a top level, and the host driver's ``NicPort``
on them (``sw.roce.softnic.rtl_nic_driver``).  Used by the bridge and by the cocotb tests of ``nic_cc_top``."""

from __future__ import annotations


async def csr_access(dut, addr: int, value: int | None = None) -> int:
    """One access on a top level's CSR bus (``csr_*`` ports): write ``value`` or read; returns ``csr_rdata``."""
    from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

    dut.csr_addr.value = addr
    if value is None:
        dut.csr_re.value = 1
    else:
        dut.csr_wdata.value = value
        dut.csr_we.value = 1
    while True:
        await RisingEdge(dut.clk)
        await ReadOnly()
        if int(dut.csr_ack.value):
            break
    await FallingEdge(dut.clk)  # drop the strobes before the next edge, or the write happens twice
    data = int(dut.csr_rdata.value)
    dut.csr_we.value = 0
    dut.csr_re.value = 0
    return data


async def ring_doorbell(dut, qp: int, n_bytes: int, qp_bits: int) -> None:
    """Queue ``n_bytes`` of work for ``qp`` on a top level's ``doorbell`` stream (waits for ready)."""
    from cocotb.triggers import RisingEdge

    dut.doorbell__payload.value = (n_bytes << qp_bits) | qp
    dut.doorbell__valid.value = 1
    while True:
        await RisingEdge(dut.clk)
        if int(dut.doorbell__ready.value):
            break
    dut.doorbell__valid.value = 0


class CocotbNicPort:
    """``sw.roce.softnic.rtl_nic_driver.NicPort`` on a simulated top level's CSR bus and doorbell stream."""

    def __init__(self, dut, qp_bits: int) -> None:
        self.dut, self.qp_bits = dut, qp_bits

    async def read(self, addr: int) -> int:
        return await csr_access(self.dut, addr)

    async def write(self, addr: int, value: int) -> None:
        await csr_access(self.dut, addr, value)

    async def doorbell(self, qp: int, n_bytes: int) -> None:
        await ring_doorbell(self.dut, qp, n_bytes, self.qp_bits)
