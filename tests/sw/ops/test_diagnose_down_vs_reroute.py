"""A leaf-spine link whose switch ports at both ends report no carrier is named ``down_link`` first, above the few
retransmissions its reroute costs one rank's QPs (which alone read as a lossy link on that rank's NIC link): the
campaign of session 38 named one such fault ``lossy_link`` first (its confidence 0.95 against the down link's 0.9)."""

from __future__ import annotations

from typing import Any

import pytest
from test_diagnose_congested import LINKS, RATE_BPS, STEP_NS, _expected, _polls, _rows

from sw.ops.diagnose import diagnose

pytestmark = pytest.mark.unit

SPINE_LINK = {"a": "p0l0", "b": "sp0", "kind": "leaf-spine", "a_port": 5, "b_port": 1, "rate_bps": RATE_BPS}


def _spine_polls(t_first: int, t_last: int, down_after_ns: int) -> list[dict[str, Any]]:
    """Both ends of p0l0<->sp0, polled every 5 ms: up until ``down_after_ns`` into the window, down after it."""
    out = []
    for t in range(t_first, t_last + 1, 5_000_000):
        up = int(t - t_first < down_after_ns)
        for sw, port, peer in (("p0l0", 5, "sp0"), ("sp0", 1, "p0l0")):
            out.append({"t_ns": t, "switch": sw, "port": port, "peer": peer, "up": up, "tx_bytes": 0, "tx_pkts": 0,
                        "rx_bytes": 0, "drops": 0, "ecn_marks": 0, "pfc_pauses": 0, "qdepth_pkts": 0,
                        "high_water_pkts": 0, "pfc_pauses_rx": 0, "pfc_paused_ns": 0})
    return out


def _nics(steps: list[dict[str, Any]], retx_of_rank1: int) -> list[dict[str, Any]]:
    """Rank 1's QPs to ranks 0 and 2 retransmit ``retx_of_rank1`` packets in the first step; nobody else does."""
    out = []
    for peer in (0, 2, 3):
        retx = retx_of_rank1 // 2 if peer != 3 else 0
        out.append({"rank": 1, "peer": peer, "step": steps[0]["step"], "t_ns": steps[0]["t1_ns"], "retx_pkts": retx,
                    "tx_pkts": 75, "oos_pkts": 0, "timeouts": 0, "cnps_rx": 0, "rate_bps": RATE_BPS,
                    "line_rate_bps": RATE_BPS})
    return out


def test_a_link_down_at_both_ends_outranks_the_retransmissions_of_its_reroute() -> None:
    steps, colls = _rows(1.0, False)
    t_first, t_last = steps[0]["t0_ns"], max(s["t1_ns"] for s in steps)
    polls = _polls(steps, 0.35, 2) + _spine_polls(t_first, t_last, STEP_NS // 2)
    out = diagnose(_expected(), [*LINKS, SPINE_LINK], steps, colls, polls, [], _nics(steps, 20))
    kinds = [(s["kind"], s["place"]) for s in out["suspects"]]
    assert ("lossy_link", "s1<->p0l0") in kinds, f"the reroute's retransmissions raised no lossy suspect: {kinds}"
    assert kinds[0] == ("down_link", "p0l0<->sp0"), kinds
    assert out["suspects"][0]["confidence"] > max(s["confidence"] for s in out["suspects"][1:])
