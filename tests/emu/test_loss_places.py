"""``emu.loss``: the places whose drop counters grew, largest first, and the one line naming them with the
fidelity verdict (never a bare count)."""

from __future__ import annotations

import pytest

from emu.loss import loss_places, loss_summary

pytestmark = pytest.mark.unit


def test_places_are_the_grown_counters_largest_first() -> None:
    before = {"leaf0 port 1 rx_kernel_drops": 3, "leaf0 parser": 0, "s0 udp_rcvbuf_errors": 5}
    after = {"leaf0 port 1 rx_kernel_drops": 10, "leaf0 parser": 0, "s0 udp_rcvbuf_errors": 20,
             "spine0 port 2 queue_drop_pkts": 1}
    assert list(loss_places(before, after).items()) == [
        ("s0 udp_rcvbuf_errors", 15), ("leaf0 port 1 rx_kernel_drops", 7), ("spine0 port 2 queue_drop_pkts", 1)]


def test_summary_names_places_and_the_fidelity_verdict() -> None:
    line = loss_summary({"leaf0 port 1 rx_kernel_drops": 7}, {"ok": True})
    assert line == "lost at: leaf0 port 1 rx_kernel_drops +7; fidelity ok"
    starved = {"ok": False, "worst_component": "leaf0 ingress", "late_share": 0.05}
    line = loss_summary({}, starved)
    assert line.startswith("no drop counter grew") and "leaf0 ingress late for 5.00 %" in line
    many = {f"leaf0 port {i} rx_kernel_drops": 1 for i in range(10)}
    assert loss_summary(many, {"ok": True}, limit=2).count("+1") == 2
