"""The ``slow_gpu`` / ``restore_gpu`` fault kind: its rank and factor checks (one line naming the action and the
range) and its effect on the fabric's straggler directory, which ``sw.units.straggler`` ranks read.  Needs no
running fabric: the injector of a ``Fabric`` that is not up writes only files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emu.fabric import Fabric
from emu.faults import ACTIONS, FaultError, FaultInjector
from sw.units.straggler import compute_factor

pytestmark = pytest.mark.unit


@pytest.fixture
def injector(tmp_path: Path) -> FaultInjector:
    return FaultInjector(Fabric(workdir=str(tmp_path)), str(tmp_path / "faults.jsonl"))   # default 4x2: 8 ranks


def test_slow_gpu_sets_then_restore_gpu_clears_the_rank_factor(injector: FaultInjector) -> None:
    assert {"slow_gpu", "restore_gpu"} <= set(ACTIONS)
    d = injector.straggler_dir
    event = injector.slow_gpu(3, 2.5)
    assert event.ok and event.changed == ["rank3"]
    assert compute_factor(d, 3) == 2.5 and compute_factor(d, 2) == 1.0
    assert injector.active()["slow_gpus"] == {"3": 2.5}
    injector.apply("slow_gpu", "7", "4")
    injector.restore_gpu(3)
    assert compute_factor(d, 3) == 1.0 and compute_factor(d, 7) == 4.0
    assert injector.active()["slow_gpus"] == {"7": 4.0}
    log = [json.loads(line) for line in injector.log_path.read_text().splitlines()]
    assert [(e["action"], e["target"], e["ok"]) for e in log] == [("slow_gpu", "3", True), ("slow_gpu", "7", True),
                                                                  ("restore_gpu", "3", True)]


def test_slow_gpu_script_line_reaches_the_directory(injector: FaultInjector) -> None:
    injector.run_script("+0s slow_gpu 1 3   # rank 1 three times slower\n")
    assert compute_factor(injector.straggler_dir, 1) == 3.0


@pytest.mark.parametrize(("target", "value", "message"), [
    ("8", "2", "slow_gpu 8: expected a rank in 0..7"),
    ("-1", "2", "slow_gpu -1: expected a rank in 0..7"),
    ("s0", "2", "slow_gpu s0: expected a rank in 0..7"),
    ("1", None, "slow_gpu 1: needs a FACTOR in 1..1000"),
    ("1", "0.5", "slow_gpu 1 0.5: FACTOR must be in 1..1000"),
    ("1", "1001", "slow_gpu 1 1001: FACTOR must be in 1..1000"),
    ("1", "nan", "slow_gpu 1 nan: FACTOR must be in 1..1000"),
    ("1", "fast", "slow_gpu 1 fast: FACTOR must be in 1..1000"),
])
def test_bad_rank_or_factor_is_a_one_line_fault_error(injector: FaultInjector, target: str, value: str | None,
                                                       message: str) -> None:
    with pytest.raises(FaultError) as exc:
        injector.apply("slow_gpu", target, value)
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert not injector.straggler_dir.exists() or compute_factor(injector.straggler_dir, 1) == 1.0
    assert injector.active()["slow_gpus"] == {}
    assert json.loads(injector.log_path.read_text().splitlines()[-1])["ok"] is False


def test_restore_gpu_names_its_own_action_on_a_bad_rank(injector: FaultInjector) -> None:
    with pytest.raises(FaultError, match=r"restore_gpu 12: expected a rank in 0\.\.7"):
        injector.restore_gpu(12)
