"""PFC on one lossless priority of a port (``pfc_enable PORT 1 3``, the RoCE deployment: DSCP 26 -> priority 3
lossless, everything else lossy): only that priority is accounted and paused upstream, only its received pauses
hold its queue; the other priorities tail-drop and keep flowing."""

from __future__ import annotations

import pytest

from p4.errors import CommandError
from p4.switch.pfc import ALL_PRIORITIES, PfcManager, parse_priorities, port_mac
from p4.switch.tm import TrafficManager
from sw.units.pfc_frame import build_pfc_frame, parse_pfc_frame

pytestmark = pytest.mark.unit

RATE_BPS = 1e9
LOSSLESS = 3


def _setup() -> tuple[TrafficManager, PfcManager, list[tuple[int, bytes, int]]]:
    tm = TrafficManager(priority_levels=8, default_depth_pkts=1000)
    sent: list[tuple[int, bytes, int]] = []
    pfc = PfcManager(tm, lambda port, frame, now: sent.append((port, frame, now)), device_id=7)
    for port in (1, 2):
        tm.set_port_rate_Bps(RATE_BPS / 8, port)
        pfc.execute(["pfc_enable", str(port), "1", str(LOSSLESS)], 0)
        pfc.set_thresholds(port, 3000, 1000, 2000)
    return tm, pfc, sent


def test_only_the_lossless_priority_is_accounted_and_paused_upstream() -> None:
    tm, pfc, sent = _setup()
    for prio in (0, LOSSLESS):
        for i in range(6):                       # 6000 B from port 1 on each priority: beyond XOFF + headroom
            if pfc.admit(1, prio, 1000):
                qp = tm.enqueue(2, (prio, i), 1000, 0, prio)
                pfc.on_enqueued(qp, 1, prio, 1000, 0)
    pauses = [parse_pfc_frame(f) for _p, f, _t in sent]
    assert pauses == [{LOSSLESS: 0xFFFF}]        # one XOFF, for priority 3 only, toward port 1
    c = pfc.counters(1)
    assert (c[LOSSLESS]["xoff_events"], c[LOSSLESS]["headroom_drop_pkts"]) == (1, 1)
    assert not any(c[0].values())                # priority 0 is lossy: no accounting, no pause, no headroom drop
    rows = {r["prio"]: r for r in tm.queue_rows(2, 0)}
    assert (rows[0]["enq_pkts"], rows[LOSSLESS]["enq_pkts"]) == (6, 5)
    stats = pfc.execute(["pfc_stats", "1"], 0).splitlines()
    on = {int(w[1]): int(w[2]) for w in (ln.split() for ln in stats[1:])}
    assert on[LOSSLESS] == 1 and on[0] == 0


def test_received_pauses_hold_only_a_lossless_priority() -> None:
    tm, pfc, sent = _setup()
    tm.enqueue(2, "lossy", 100, 0, 0)
    tm.enqueue(2, "lossless", 100, 0, LOSSLESS)
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {0: 0xFFFF, LOSSLESS: 0xFFFF}), 0)
    assert [q.item for q in tm.dequeue_due(1_000_000)] == ["lossy"]   # priority 0's pause is not honoured
    c = pfc.counters(2, 1_000_000)
    assert c[0]["pauses_rx"] == 1 and c[0]["paused_ns"] == 0          # ... but counted as received
    assert c[LOSSLESS]["pauses_rx"] == 1 and c[LOSSLESS]["paused_ns"] == 1_000_000
    pfc.on_frame(2, build_pfc_frame(port_mac(9, 9), {LOSSLESS: 0}), 1_000_000)
    assert [q.item for q in tm.dequeue_due(1_000_000)] == ["lossless"]


def test_priority_lists_and_errors() -> None:
    assert parse_priorities("3") == 0x08 and parse_priorities("3,4") == 0x18 and parse_priorities("all") == 0xFF
    tm, pfc, _sent = _setup()
    pfc.execute(["pfc_enable", "1", "1"], 0)     # without a list: every priority, as before
    assert pfc.ports[1].config.priorities == ALL_PRIORITIES
    for bad in (["pfc_enable", "1", "1", "8"], ["pfc_enable", "1", "1", "x"], ["pfc_enable", "1", "1", "3", "4"]):
        with pytest.raises(CommandError) as exc:
            pfc.execute(bad, 0)
        assert "\n" not in str(exc.value)
