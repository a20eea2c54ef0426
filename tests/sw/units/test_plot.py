"""The one plot set-up (``sw.units.plot.plot_figure``): saved at the asked size and closed; nothing saved and the
figure still closed when drawing fails; importing it (or a command that plots) loads no matplotlib."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from sw.units.plot import plot_figure

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def _png_size_px(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_saves_at_the_asked_size_and_closes(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    out = tmp_path / "two.png"
    with plot_figure(out, 1, 2, figsize=(4, 2), dpi=50) as (fig, (left, right)):
        left.plot([0, 1], [1, 0])
        right.bar(["a", "b"], [1, 2])
        assert not out.exists()                     # saved on leaving the block, not before
    assert _png_size_px(out) == (200, 100)
    assert fig.number not in plt.get_fignums()


def test_a_failing_drawing_saves_nothing_and_closes(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    out = tmp_path / "bad.png"
    before = plt.get_fignums()
    with pytest.raises(ZeroDivisionError), plot_figure(out, figsize=(3, 2)) as (_, ax):
        ax.plot([0, 1], [0, 1 / 0])
    assert not out.exists() and plt.get_fignums() == before


def test_an_unwritable_path_raises_oserror_and_closes(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    with pytest.raises(OSError), plot_figure(tmp_path / "no-such-dir" / "x.png", figsize=(3, 2)) as (_, ax):
        ax.plot([0, 1], [0, 1])
    assert plt.get_fignums() == before


def test_importing_the_plotting_commands_loads_no_matplotlib() -> None:
    code = ("import sys, sw.units.plot, sw.sim.cli, sw.apps.ops_cost, sw.apps.ops_campaign, sw.apps.incast_bench, "
            "emu.fabric_bench; print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
