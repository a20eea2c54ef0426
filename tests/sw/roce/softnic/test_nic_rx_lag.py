"""The NIC's receive path accounts its lateness (issue 16): frames serviced vs the kernel's receive stamps of the
port's batch (``nic IP rx``), and congestion feedback reaching the rate model vs its arrival (``nic IP cc
reaction``: a CNP; an INT-echo ACK under HPCC).  Stamps a day old make every event late and the verdict not ok;
fresh ones keep it ok; a port without stamps accounts nothing (no invented figures).  The clock runs 10^9 times
slower than the wall, so a fresh stamp is on time whatever the load (a second of wall time is 1 ns)."""

from __future__ import annotations

import time

import pytest

from sw.clock import Clock
from sw.clock.lag import fidelity, fidelity_warning, mtu_serialization_ns
from sw.roce.softnic.nic import SoftNic
from sw.roce.transport.qp import QueuePair
from sw.roce.transport.qp_connect import connect, qp_info
from tests.sw.roce.softnic.mem_port import MemPort
from tests.sw.roce.softnic.rx_frames import IP_B, MAC_B, real_frames

pytestmark = pytest.mark.unit

DILATION = 1e9
DAY_NS = 86_400 * 10**9
LINE_BPS = 10**10


class StampedPort(MemPort):
    """The unit tests' in-memory port, plus the receive stamps a ``RawSocketPort`` sets after each batch."""

    def __init__(self) -> None:
        super().__init__(mac=MAC_B, ip=IP_B)
        self.rx_first_ts_ns = 0
        self.rx_last_ts_ns = 0


def _nic(cc: str, port: MemPort) -> tuple[SoftNic, QueuePair]:
    """A NIC (receiver side of ``real_frames``) with QP 0x11 in RTS, so a CNP reaches a rate model."""
    nic = SoftNic(port, mac=MAC_B, ip=IP_B, line_rate_bps=LINE_BPS, cc=cc, clock=Clock(DILATION))
    pd, cq = nic.alloc_pd(), nic.create_cq()
    qp, peer = nic.create_qp(pd, cq), nic.create_qp(pd, cq)
    assert qp.qp_num == 0x11
    connect(qp, 1, qp_info(peer, 2), path_mtu=1024)
    return nic, qp


def _receive(nic: SoftNic, port: StampedPort, frames: list[bytes], age_ns: int) -> None:
    """``frames`` arrive as one batch whose first and last frame the kernel stamped ``age_ns`` ago (wall)."""
    now = time.time_ns()
    port.rx = list(frames)
    port.rx_first_ts_ns, port.rx_last_ts_ns = now - age_ns - 1000, now - age_ns
    assert nic.progress()


@pytest.mark.parametrize("late", [False, True], ids=["fresh_stamps", "day_old_stamps"])
def test_receive_lateness_and_cnp_reaction_follow_the_arrival_stamps(late: bool) -> None:
    port = StampedPort()
    nic, qp = _nic("dcqcn", port)
    f = real_frames(0x11)
    batch = [f["write"], f["cnp"], f["send"], f["ack"]]
    _receive(nic, port, batch, DAY_NS if late else 0)
    assert nic.counters.rx_frames == 4 and qp.counters.cnps_received == 1
    assert qp.pacer.rate_bps < LINE_BPS                          # the CNP cut the rate ...
    rx, reaction = nic.rx_lag, nic.reaction_lag
    assert rx.events == 4 and reaction.events == 1               # ... and its reaction was timed
    assert rx.bound_ns == reaction.bound_ns == mtu_serialization_ns(LINE_BPS)
    fid = fidelity({"nic pacer": nic.lag, "nic rx": rx, "nic cc reaction": reaction}, DILATION)
    if late:
        assert rx.late == 4 and reaction.late == 1 and rx.max_ns >= DAY_NS / DILATION
        assert fid["ok"] is False and fid["worst_component"] in ("nic rx", "nic cc reaction")
        line = fidelity_warning(fid)
        assert line is not None and fid["worst_component"] in line
    else:
        assert rx.late == 0 and reaction.late == 0 and fid["ok"] is True


def test_int_echo_acks_are_reactions_under_hpcc_only() -> None:
    echo = real_frames(0x11)["int_echo"]
    for cc, reactions in (("hpcc", 1), ("dcqcn", 0)):
        port = StampedPort()
        nic, _qp = _nic(cc, port)
        _receive(nic, port, [echo], DAY_NS)
        assert nic.counters.int_frames == 1 and nic.rx_lag.events == 1 and nic.rx_lag.late == 1
        assert nic.reaction_lag.events == reactions and nic.reaction_lag.late == reactions, cc


def test_a_port_without_stamps_accounts_nothing() -> None:
    port = MemPort(mac=MAC_B, ip=IP_B)
    nic, qp = _nic("dcqcn", port)
    port.rx = [real_frames(0x11)["cnp"]]
    assert nic.progress() and qp.counters.cnps_received == 1
    assert nic.rx_lag.events == 0 and nic.reaction_lag.events == 0
