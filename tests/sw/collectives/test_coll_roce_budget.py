"""The RoCE transport's in-flight budget: whole frames on a dilated fabric (so a few senders cannot overrun a
64-packet switch queue), one wall-time round trip at line rate when network time runs at wall speed."""

from __future__ import annotations

import pytest

from sw.collectives.transport.roce import (
    BUDGET_PEERS,
    INFLIGHT_FRAMES,
    SLOT_BYTES,
    SendBudget,
    inflight_budget_bytes,
    send_bytes_for,
)

pytestmark = pytest.mark.unit


def test_dilated_fabric_budget_is_whole_frames_and_several_sends() -> None:
    budget = inflight_budget_bytes(100e6, 4096, 50.0)
    assert budget == INFLIGHT_FRAMES * 4096
    assert 3 * (budget // 4096 + SLOT_BYTES // 4096) < 64     # three senders, one SEND over the limit each
    assert budget // SLOT_BYTES >= 2                          # completions free it while more SENDs are on the wire


def test_undilated_fast_link_budget_covers_a_round_trip() -> None:
    assert inflight_budget_bytes(1e9, 4096, 1.0) == int(1e9 / 8 * 0.010)
    assert inflight_budget_bytes(1e9, 4096, 10.0) == int(1e9 / 8 * 0.010 / 10)


def test_nic_budget_spans_peers_but_each_peer_keeps_one_share() -> None:
    share = inflight_budget_bytes(100e6, 4096, 50.0)
    budget = SendBudget(BUDGET_PEERS * share, share)
    assert budget.limit_bytes > budget.peer_limit_bytes == share   # a slow receiver holds back only its share
    assert SendBudget(share).peer_limit_bytes == share              # one limit when no share is given


@pytest.mark.parametrize("path_mtu", [256, 1024, 4096])
def test_two_sends_fit_a_peer_share_at_every_path_mtu(path_mtu: int) -> None:
    """The fabric's 1500-byte links give a 1024-byte path MTU: a 12-frame share is 12 KiB, less than one 16 KiB
    slot, so SENDs of a whole slot were stop-and-wait.  Two SENDs of whole frames must fit each share."""
    share = inflight_budget_bytes(100e6, path_mtu, 50.0)
    send = SendBudget(BUDGET_PEERS * share, share, path_mtu).send_bytes
    assert send == send_bytes_for(share, path_mtu)
    assert send % path_mtu == 0 and path_mtu <= send <= SLOT_BYTES
    assert 2 * send <= share                                 # the next SEND goes while one is acknowledged
    assert 3 * (share + send) // path_mtu < 64               # three senders, one SEND over the limit each
