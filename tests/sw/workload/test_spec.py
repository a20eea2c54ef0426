"""Model specs: presets load, JSON files override them, and every bad field is one error naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sw.workload import PRESETS, WorkloadSpecError, load_spec, resolve_for_world

pytestmark = pytest.mark.unit


def _file(tmp_path: Path, data: object) -> str:
    path = tmp_path / "model.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_presets_have_a_dense_and_an_moe_model() -> None:
    kinds = {load_spec(name).moe for name in PRESETS}
    assert kinds == {True, False}
    moe = load_spec("moe-small")
    assert moe.experts == 8 and moe.top_k == 2 and moe.total_params() > moe.layers * moe.dense_params_per_layer()


def test_a_json_file_with_the_same_fields(tmp_path: Path) -> None:
    spec = load_spec(_file(tmp_path, {"layers": 2, "hidden": 64, "tokens_per_step": 64, "gpu_tflops": 1.0,
                                      "scale": 0.5, "experts": 4, "top_k": 1, "ep": 4}))
    assert (spec.name, spec.layers, spec.experts, spec.ep, spec.scale) == ("model", 2, 4, 4, 0.5)
    based = load_spec(_file(tmp_path, {"preset": "gpt-small", "layers": 3}))
    assert based.layers == 3 and based.hidden == PRESETS["gpt-small"].hidden


@pytest.mark.parametrize(("data", "field"), [
    ({"preset": "gpt-small", "layers": -1}, "layers -1"),
    ({"preset": "gpt-small", "hidden": 0}, "hidden 0"),
    ({"preset": "gpt-small", "tokens_per_step": -5}, "tokens_per_step -5"),
    ({"preset": "gpt-small", "scale": -0.1}, "scale -0.1"),
    ({"preset": "moe-small", "experts": 6, "ep": 4}, "experts 6: not divisible by ep 4"),
    ({"preset": "moe-small", "top_k": 9}, "top_k 9"),
    ({"preset": "gpt-small", "top_k": 2}, "top_k"),
    ({"preset": "gpt-small", "widht": 2}, "widht: unknown field"),
    ({"preset": "gpt-huge"}, "preset 'gpt-huge': unknown"),
    ({"layers": 2}, "hidden: missing"),
])
def test_bad_fields_name_the_field(tmp_path: Path, data: dict, field: str) -> None:
    path = _file(tmp_path, data)
    with pytest.raises(WorkloadSpecError) as err:
        load_spec(path)
    assert str(err.value).startswith(f"{path}: {field}"), str(err.value)


def test_unknown_preset_and_world_checks() -> None:
    with pytest.raises(WorkloadSpecError, match=r"^--model gpt-5: unknown preset \(presets: gpt-small"):
        load_spec("gpt-5")
    with pytest.raises(WorkloadSpecError, match=r"^experts 8: not divisible by the 3 expert-parallel ranks"):
        resolve_for_world(load_spec("moe-small"), 3)
    assert resolve_for_world(load_spec("moe-small"), 4).ep == 4
