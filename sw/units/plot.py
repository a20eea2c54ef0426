"""The one matplotlib set-up of every ``--plot``: a headless (Agg) figure with its axes, laid out tight, saved and
closed on leaving the ``with``.

matplotlib is imported when a figure is drawn, never when this module (or a command that can plot) is imported:
the CLIs start without it, and a machine without matplotlib runs everything but the plots.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def plot_figure(path: str | os.PathLike[str], nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float],
                dpi: float | None = None, squeeze: bool = True) -> Iterator[tuple[Any, Any]]:
    """Yield ``(fig, axes)`` of ``plt.subplots(nrows, ncols)``; on a normal exit lay out tight and save to ``path``
    (``dpi``: matplotlib's default when None), always close the figure (an OSError of the save propagates)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=squeeze)
    try:
        yield fig, axes
        fig.tight_layout()
        fig.savefig(path, **({} if dpi is None else {"dpi": dpi}))
    finally:
        plt.close(fig)
