"""``starpulse train --compare baseline,starpulse --local``: both runs in the JSON contract (``runs``, ``ratios``),
ratios computed from the runs' figures, each configuration's algorithms reaching the ranks' tuner, the note that
routing/CC do not apply locally, and the one-line error (exit 2) for a bad configuration name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sw.apps import train
from sw.apps.rank_job import hpcc_int_warning
from sw.apps.train_compare import RATIO_KEYS, CompareError, parse_compare, ratios

pytestmark = pytest.mark.unit

TINY_MOE = {"layers": 1, "hidden": 128, "tokens_per_step": 128, "gpu_tflops": 10.0, "scale": 0.01,
            "nic_gbps": 100.0, "experts": 4, "top_k": 2, "bucket_mb": 1.0}
SINGLE_KEYS = ("step_s", "comm_share", "link_load", "drops", "wrong", "per_rank", "config", "fidelity")


def test_local_compare_runs_both_configurations_and_reports_their_ratios(tmp_path: Path, capfd) -> None:
    model = tmp_path / "tiny-moe.json"
    model.write_text(json.dumps(TINY_MOE))
    out = tmp_path / "compare.json"
    code = train.main(["--local", "--servers", "2", "--gpus", "2", "--model", str(model), "--steps", "1",
                       "--warmup", "1", "--compare", "baseline,starpulse", "--json", str(out)])
    text = capfd.readouterr()
    assert code == 0, text.err
    rep = json.loads(out.read_text())
    assert set(rep) == {"runs", "ratios"} and set(rep["runs"]) == {"baseline", "starpulse"}
    for name, run in rep["runs"].items():
        assert all(k in run for k in SINGLE_KEYS) and "timeline" not in run, name
        assert run["wrong"] == 0 and run["config"]["world"] == 4 and run["comparison"]["name"] == name
    base, new = rep["runs"]["baseline"], rep["runs"]["starpulse"]
    for key in RATIO_KEYS:
        assert rep["ratios"][key] == pytest.approx(new[key] / base[key]), key
    assert set(base["algorithms"]["allreduce"].values()) == {"ring"}
    assert set(base["algorithms"]["alltoall"].values()) == {"pairwise"}
    assert set(new["algorithms"]["alltoall"].values()) == {"rail"}          # the tuner's rail-aware choice
    assert base["comparison"]["env"]["STARPULSE_ROCE_CC"] == "none"
    assert new["comparison"]["env"]["STARPULSE_ROCE_CC"] == "dcqcn"
    assert "ratios starpulse/baseline: comm_share" in text.out
    assert "algorithms: allreduce ring" in text.out and "alltoall rail" in text.out
    assert "--local: no switches, no RoCE: routing (ECMP vs rail) and congestion control do not apply" in text.out


def test_ratios_are_none_where_baseline_is_zero() -> None:
    runs = {"baseline": {"comm_share": 0.5, "step_s": 2.0, "link_load": 0.0},
            "starpulse": {"comm_share": 0.25, "step_s": 1.0, "link_load": 0.3}}
    assert ratios(runs) == {"comm_share": 0.5, "step_s": 0.5, "link_load": None}


@pytest.mark.parametrize(("value", "message"), [
    ("baseline,nccl", "--compare baseline,nccl: unknown configuration 'nccl' (allowed: baseline, starpulse)"),
    ("starpulse", "--compare starpulse: give each of baseline, starpulse once"),
    ("baseline,baseline", "--compare baseline,baseline: give each of baseline, starpulse once"),
])
def test_bad_configuration_names_are_one_line_and_exit_2(capfd, value: str, message: str) -> None:
    code = train.main(["--local", "--servers", "2", "--gpus", "2", "--compare", value])
    err = capfd.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err


def test_compare_runs_starpulse_on_the_cc_asked_for_and_baseline_on_none() -> None:
    base, new = parse_compare("baseline,starpulse")
    assert (base.env["STARPULSE_ROCE_CC"], new.env["STARPULSE_ROCE_CC"]) == ("none", "dcqcn")   # the default
    base, new = parse_compare("baseline,starpulse", "hpcc")
    assert (base.env["STARPULSE_ROCE_CC"], new.env["STARPULSE_ROCE_CC"]) == ("none", "hpcc")
    assert new.description.endswith(", HPCC") and new.env["STARPULSE_AUTOTUNE"] == "on"
    new, base = parse_compare("starpulse,baseline", "HPCC")                         # the order is the user's
    assert new.name == "starpulse" and new.env["STARPULSE_ROCE_CC"] == "hpcc"
    with pytest.raises(CompareError, match=r"^\$STARPULSE_ROCE_CC='timely': expected one of dcqcn, hpcc, none$"):
        parse_compare("baseline,starpulse", "timely", "$STARPULSE_ROCE_CC")


def test_local_compare_with_roce_cc_hpcc_gives_starpulse_hpcc_and_baseline_none(tmp_path: Path, capfd,
                                                                                 monkeypatch) -> None:
    monkeypatch.setenv("STARPULSE_ROCE_CC", "dcqcn")           # the flag wins over the environment
    model = tmp_path / "tiny-moe.json"
    model.write_text(json.dumps(TINY_MOE))
    out = tmp_path / "compare.json"
    code = train.main(["--local", "--servers", "2", "--gpus", "1", "--model", str(model), "--steps", "1",
                       "--warmup", "0", "--compare", "baseline,starpulse", "--roce-cc", "hpcc", "--json", str(out)])
    assert code == 0, capfd.readouterr().err
    runs = json.loads(out.read_text())["runs"]
    assert runs["baseline"]["comparison"]["env"]["STARPULSE_ROCE_CC"] == "none"
    assert runs["starpulse"]["comparison"]["env"]["STARPULSE_ROCE_CC"] == "hpcc"
    assert runs["starpulse"]["comparison"]["description"].endswith("HPCC")


def test_hpcc_on_a_fabric_that_strips_int_is_warned_about() -> None:
    assert hpcc_int_warning({"int_sink": "host"}, "hpcc") is None
    assert hpcc_int_warning({"int_sink": "report"}, "dcqcn") is None and hpcc_int_warning({}, "hpcc") is None
    warning = hpcc_int_warning({"int_sink": "report"}, "hpcc")
    assert warning is not None and "'report'" in warning and "--int-sink host" in warning
    assert "'off'" in (hpcc_int_warning({"int_sink": "off"}, "hpcc") or "")
