"""sw.clock.lag: the lateness histogram's percentiles, late share, merge/serialization and the fidelity verdict."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sw.clock.lag import (
    ENV_LINK_MTU,
    FIDELITY_KEYS,
    LagStats,
    fidelity,
    fidelity_warning,
    link_mtu,
    mtu_serialization_ns,
    quantile_index,
    read_lag_dir,
    register,
    write_lag_file,
)


def test_percentiles_late_share_and_bound() -> None:
    s = LagStats(bound_ns=1000)
    for late in range(10_000):        # 0..9999 ns, 9000 of them later than 999 ns... and 8999 later than 1000
        s.record(late)
    s.record(-50)                     # early counts as on time
    assert s.events == 10_001 and s.late == 8999 and s.max_ns == 9999
    assert 4999 <= s.percentile_ns(0.5) <= 4999 * 17 // 16
    assert 9899 <= s.percentile_ns(0.99) <= 9999
    assert not s.ok and s.summary()["late_share"] == pytest.approx(8999 / 10_001, abs=1e-6)
    ok = LagStats(bound_ns=1000)
    ok.record(5, n=9990)
    ok.record(50_000, n=9)            # 9 of 9999 late: within 99.9 %
    assert ok.ok and ok.summary()["lag_max_ns"] == 50_000
    ok.record(50_000, n=2)
    assert not ok.ok


def test_the_bound_is_one_frame_of_the_fabrics_mtu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_LINK_MTU, raising=False)
    assert link_mtu() == 1500 and mtu_serialization_ns(100e6) == 123_040     # 1,538 wire bytes at 100 Mb/s
    monkeypatch.setenv(ENV_LINK_MTU, "9000")                               # a jumbo fabric sets it for its processes
    assert link_mtu() == 9000 and mtu_serialization_ns(100e6) == 723_040
    assert mtu_serialization_ns(100e6, wire_bytes=1538) == 123_040           # an explicit frame size wins
    for bad in ("abc", "100", "9217", "-1"):
        monkeypatch.setenv(ENV_LINK_MTU, bad)
        with pytest.raises(ValueError, match=r"\$STARPULSE_LINK_MTU=.*576\.\.9216"):
            mtu_serialization_ns(100e6)


def test_quantile_index_weighs_buckets() -> None:
    weights = [97, 1, 1, 1]               # e.g. ns at depths 0..3: the rank rule LagStats and the TM share
    assert [quantile_index(weights, 100, q) for q in (0.5, 0.97, 0.98, 0.99, 1.0)] == [0, 0, 1, 2, 3]
    assert quantile_index([0, 0, 5, 0], 5, 0.01) == 2     # empty buckets never answer
    assert quantile_index([0, 0], 0, 0.99) == 0


def test_merge_and_dict_round_trip() -> None:
    a, b = LagStats(200), LagStats(200)
    a.record(10, 5)
    b.record(300, 3)
    b.record(1 << 40)
    d = json.loads(json.dumps(a.merge(b).to_dict()))
    back = LagStats.from_dict(d)
    assert back.summary() == a.summary() and back.events == 9 and back.late == 4 and back.max_ns == 1 << 40
    assert len(json.dumps(d)) < 200
    with pytest.raises(ValueError, match="not a lag-stats dict"):
        LagStats.from_dict({"bound_ns": 1})


def test_fidelity_verdict_names_the_worst_component() -> None:
    good, bad = LagStats(mtu_serialization_ns(100e9)), LagStats(mtu_serialization_ns(100e6))
    assert good.bound_ns == 123 and bad.bound_ns == 123_040
    good.record(50, 10_000)
    bad.record(10, 900)
    bad.record(500_000, 100)
    fid = fidelity({"s1.tm": good, "h1.pacer": bad, "idle": LagStats(5)}, 20.0)
    assert tuple(fid) == FIDELITY_KEYS
    assert fid["ok"] is False and fid["worst_component"] == "h1.pacer" and fid["late_share"] == 0.1
    assert fid["lag_max_ns"] == 500_000 and fid["bound_ns"] == 123_040 and fid["time_dilation"] == 20.0
    line = fidelity_warning(fid)
    assert line is not None and "h1.pacer" in line and "\n" not in line
    assert fidelity_warning(fidelity({"s1.tm": good}, 1.0)) is None


def test_a_forked_child_reports_only_its_own_components(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks are forked from the launcher: the components the parent registered are the parent's to report."""
    monkeypatch.setattr("sw.clock.lag._registry", {})   # this test's components only, gone afterwards
    parent = LagStats(bound_ns=1000)
    parent.record(10**9)              # a very late component of the parent (e.g. a NIC pacer of an earlier run)
    register("parent pacer", parent)
    pid = os.fork()
    if pid == 0:                      # the child: its own throttle, then what it writes at exit
        child = LagStats(bound_ns=1000)
        child.record(1)
        register("child throttle", child)
        os._exit(0 if write_lag_file(str(tmp_path)) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert list(read_lag_dir(tmp_path)) == ["child throttle"]
