"""``starpulse train --local``: the JSON contract keys, exact results, the plot, a straggler from ``--slow``, and
one-line errors (exit 2) for bad models and flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sw.apps import train

pytestmark = pytest.mark.unit

KEYS = ("step_s", "comm_share", "link_load", "drops", "wrong", "per_rank", "config", "fidelity")
SMALL = {"layers": 2, "hidden": 128, "tokens_per_step": 256, "gpu_tflops": 10.0, "scale": 0.01, "nic_gbps": 100.0,
         "experts": 4, "top_k": 2, "bucket_mb": 1.0}


def test_moe_run_writes_the_contract_keys_the_plot_and_exact_results(tmp_path: Path, capfd) -> None:
    model = tmp_path / "tiny-moe.json"
    model.write_text(json.dumps(SMALL))
    out, png = tmp_path / "train.json", tmp_path / "timeline.png"
    code = train.main(["--local", "--servers", "2", "--gpus", "2", "--model", str(model), "--steps", "2",
                       "--warmup", "1", "--json", str(out), "--plot", str(png), "--slow", "1:3"])
    text = capfd.readouterr()
    assert code == 0, text.err
    rep = json.loads(out.read_text())
    assert all(k in rep for k in KEYS) and "timeline" not in rep
    assert rep["wrong"] == 0 and rep["drops"] is None and rep["mode"] == "local"
    assert rep["config"]["model"]["name"] == "tiny-moe" and rep["config"]["world"] == 4
    assert [r["compute_factor"] for r in rep["per_rank"]] == [1.0, 3.0, 1.0, 1.0]
    assert set(rep["fidelity"]) >= {"ok", "time_dilation", "worst_component"}
    assert 0 < rep["comm_share"] < 1 and rep["step_s"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "step_s " in text.out and "step 2/2" in text.err


@pytest.mark.parametrize(("argv", "message"), [
    (["--model", "gpt-5"], "--model gpt-5: unknown preset"),
    (["--model", "moe-small", "--servers", "3", "--gpus", "1"], "experts 8: not divisible by the 3 expert-parallel"),
    (["--slow", "4:2"], "--slow 4:2: expected RANK:FACTOR with RANK in 0..3"),
    (["--steps", "0"], "--steps: '0': must be an integer within 1..100000"),
])
def test_bad_input_is_one_line_and_exit_2(capfd, argv: list[str], message: str) -> None:
    try:
        code = train.main(["--local", "--servers", "2", "--gpus", "2", *argv])
    except SystemExit as exc:     # argparse's own flag checks exit from parse_args
        code = exc.code
    err = capfd.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
