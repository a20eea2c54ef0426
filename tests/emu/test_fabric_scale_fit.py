"""``scripts/fabric_scale.py`` without a fabric: the topology per NIC count and the fitted growth exponents."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import fabric_scale  # noqa: E402

pytestmark = pytest.mark.unit


def test_topology_per_size() -> None:
    assert fabric_scale.topology(16) == {"servers": 4, "gpus_per_server": 4, "spines": 2, "pods": 1}
    assert fabric_scale.topology(128) == {"servers": 32, "gpus_per_server": 4, "spines": 4, "pods": 1}
    assert fabric_scale.topology(256) == {"servers": 64, "gpus_per_server": 4, "spines": 4, "pods": 2}


def test_growth_exponents_are_log_log_slopes() -> None:
    rows = [{"nics": n, "up_s": n ** 1.5, "test_s": 2.0 * n ** 2, "down_s": 3.0, "peak_rss_bytes": 1000 * n}
            for n in (16, 64, 256)]
    exps = fabric_scale.growth_exponents(rows)
    assert exps["up_s"] == pytest.approx(1.5) and exps["test_s"] == pytest.approx(2.0)
    assert exps["down_s"] == pytest.approx(0.0, abs=1e-9) and exps["peak_rss_bytes"] == pytest.approx(1.0)
    assert fabric_scale.growth_exponents(rows[:1])["up_s"] is None
