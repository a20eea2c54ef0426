"""A campaign whose job died part-way reports the faults it measured, marked incomplete (never as a full run)."""

from __future__ import annotations

import pytest

from sw.apps.ops_campaign import _result, plot_title, summary_lines
from sw.ops.expected import Expected

pytestmark = pytest.mark.unit


def _fault(kind: str, place: str, correct: bool) -> dict[str, object]:
    return {"kind": kind, "place": place, "severity": 1.0, "detected": correct, "top1": correct, "top3": correct,
            "correct": correct, "steps_to_detect": 1 if correct else None,
            "time_to_localize_s": 0.03 if correct else None, "wall_time_to_localize_s": 6.0 if correct else None}


def test_partial_result_keeps_the_measured_faults_and_says_it_is_incomplete() -> None:
    exp = Expected(first_step=1, last_step=3, compute_ns={0: 1e6}, step_ns=33e6, collectives={})
    partial = {"details": [_fault("slow_gpu", "rank 11", True), _fault("flapping_link", "p0l1<->sp1", False)],
               "alarms": [], "expected": exp, "false_alarms": 0, "healthy": 100}
    result = _result(partial)
    assert (result["faults"], result["detected"], result["top1_accuracy"]) == (2, 1, 0.5)
    assert result["healthy_steps"] == 100 and result["by_kind"]["slow_gpu"]["top1_accuracy"] == 1.0
    result.update({"completed": False, "error": "during fault 3 (lossy_link s0<->p0l0): the training job ended"})
    lines = summary_lines(result)
    assert lines[0] == "# INCOMPLETE: the job ended early (during fault 3 (lossy_link s0<->p0l0): the training " \
                       "job ended)"
    assert lines[1].startswith("# campaign: 2 faults, detected 1, top-1 0.50")
    result["completed"] = True
    assert not summary_lines(result)[0].startswith("# INCOMPLETE")


def test_the_plot_title_says_a_run_that_missed_its_clock_is_not_a_result() -> None:
    r = {"faults": 50, "top1_accuracy": 0.98, "top3_accuracy": 1.0, "false_alarms": 0, "healthy_steps": 100,
         "time_dilation": 192.0}
    late = plot_title({**r, "fidelity": {"ok": False, "late_share": 0.24, "worst_component": "p0l0 ingress"}})
    assert "fidelity NOT ok (24.00 % of p0l0 ingress's events late): not a result" in late and "dilation 192.0" in late
    barely = plot_title({**r, "fidelity": {"ok": False, "late_share": 0.002343, "worst_component": "p0l0 tm"}})
    assert "(0.23 % of p0l0 tm's events late)" in barely        # never rounded down to a harmless-looking 0 %
    kept = plot_title({**r, "fidelity": {"ok": True, "late_share": 0.0, "worst_component": "p0l0 tm"}})
    assert "fidelity ok" in kept and "NOT" not in kept and "not a result" not in kept
