"""The native and the Python host NIC data paths (issue 23, item 4) send and receive the same frames over a real
veth pair: every frame arrives, with a good ICRC, and the PSNs advance."""

from __future__ import annotations

import pytest

from emu.netns import NetnsLab
from sw.roce.native import build as native_build
from sw.roce.native.datapath import NativeDatapath, PythonDatapath, RxCounts, TxFlow
from sw.roce.softnic.port import RawSocketPort
from sw.roce.wire.flow import Flow
from sw.roce.wire.opcodes import Opcode
from sw.roce.wire.template import PacketTemplate


@pytest.mark.emu
def test_native_and_python_paths_over_a_veth() -> None:
    module = native_build.load()
    if module is None:
        pytest.skip("no C compiler here (bootstrap installs gcc)")
    with NetnsLab() as lab:
        a, b = f"{lab.prefix}x"[:15], f"{lab.prefix}y"[:15]
        lab.add_link(None, None, ifname_a=a, ifname_b=b, addr_a="10.0.0.1/24", addr_b="10.0.1.2/24")
        tx, rx = RawSocketPort(a, claim_udp_port=False), RawSocketPort(b, claim_udp_port=False)
        try:
            flow_mac = Flow(tx.mac, rx.mac, "10.0.0.1", "10.0.1.2", 0x101, 0x122)
            for dp in (NativeDatapath(module), PythonDatapath()):
                flow = TxFlow(PacketTemplate(flow_mac, Opcode.RDMA_WRITE_MIDDLE), bytes(range(256)) * 4)
                sent = dp.tx_burst(tx, flow, 50)
                counts = RxCounts()
                for _ in range(200):
                    rx.wait(10_000_000)
                    while dp.rx_poll(rx, counts):
                        pass
                    if counts.good >= sent:
                        break
                assert sent == 50 and flow.frames == 50 and flow.psn == 50, dp.name
                assert counts.good == 50 and counts.bad_icrc == 0 and counts.other == 0, (dp.name, counts)
                assert counts.bytes == 50 * len(flow.frame0), dp.name
        finally:
            tx.close()
            rx.close()
