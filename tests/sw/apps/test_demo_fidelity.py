"""The demo's summary.json carries one ``fidelity`` verdict over its emulated steps, and warns when it is not ok."""

from __future__ import annotations

import json

import pytest

from sw.apps import demo
from sw.clock.lag import FIDELITY_KEYS, LagStats, fidelity

pytestmark = pytest.mark.unit


def test_summary_has_one_fidelity_over_the_steps(tmp_path, monkeypatch, capfd) -> None:
    on_time, late = LagStats(1000), LagStats(1000)
    on_time.record(10, 5000)
    late.record(10, 90)
    late.record(5000, 10)
    steps = [("emulated ok", lambda _out: {"fidelity": fidelity({"s1 tm": on_time}, 50.0)}),
             ("emulated late", lambda _out: {"fidelity": fidelity({"nic 10.0.0.1 pacer": late}, 50.0)}),
             ("pure model", lambda _out: {"utilization": 0.9})]
    monkeypatch.setattr(demo, "STEPS", steps)
    assert demo.main(["--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    fid = summary["fidelity"]
    assert tuple(fid) == FIDELITY_KEYS and fid["ok"] is False and fid["worst_component"] == "nic 10.0.0.1 pacer"
    assert summary["emulated ok"]["fidelity"]["ok"] is True
    err = [line for line in capfd.readouterr().err.splitlines() if line.startswith("warning: fidelity:")]
    assert len(err) == 1 and "nic 10.0.0.1 pacer" in err[0]
