"""sw.roce.softnic.rtl_nic_driver: bad requests are refused before any register access, and the driver (with the
register
map it uses) imports neither the RTL nor Amaranth.  Its register traffic is tested against nic_cc_top in
tests/sim/nic_top (tb_nic_top_tx)."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from sw.cc.nic_regs import COUNTER_ADDR, PARAM_ADDR, REG_PARAM0, TEMPLATE_BYTES
from sw.roce.softnic.rtl_nic_driver import RtlNicDriver, RtlNicError


class _NoAccess:
    """A port for requests that must fail before reaching the bus: any access fails the test."""

    async def read(self, addr: int) -> int:
        raise AssertionError(f"register read {addr:#x} of a refused request")

    async def write(self, addr: int, value: int) -> None:
        raise AssertionError(f"register write {addr:#x} of a refused request")

    async def doorbell(self, qp: int, n_bytes: int) -> None:
        raise AssertionError("doorbell of a refused request")


@pytest.mark.parametrize("call, message", [
    (lambda nic: nic.write_template(1, bytes(TEMPLATE_BYTES - 1)), "53 bytes, the NIC takes 54"),
    (lambda nic: nic.set_cc_mode("timely"), "allowed none, dcqcn, hpcc"),
    (lambda nic: nic.set_param("alpha", 1), "unknown NIC parameter 'alpha'"),
    (lambda nic: nic.ring(2, 6), "6 bytes, must be a positive multiple of 4"),
    (lambda nic: nic.ring(2, 0), "0 bytes"),
])
def test_bad_requests_are_refused_before_the_bus(call, message: str) -> None:
    with pytest.raises(RtlNicError, match=message):
        asyncio.run(call(RtlNicDriver(_NoAccess())))


def test_the_map_is_importable_without_the_rtl() -> None:
    code = ("import sys, sw.roce.softnic.rtl_nic_driver; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('hw', 'amaranth')]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert PARAM_ADDR["cc_mode"] == REG_PARAM0 and COUNTER_ADDR["TX_FRAMES"] == 0x12
