"""The straggler fault hooks: a rank's compute slowed by a factor, or its NIC paced at a share of its line rate (a
slow NIC), at run time, set from outside the rank.

The factors live in a directory every rank of a job sees (a ``FileStore``, keys ``compute_factor/RANK`` and
``nic_rate_share/RANK``); the
training workload reads its own between steps, ``starpulse train --slow RANK:FACTOR`` sets one before the job
starts and the fault injector can set or clear one while it runs.  A leaf, so any layer (``emu`` too) may call it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from .file_store import FileStore

ENV_SLOW_DIR = "STARPULSE_SLOW_DIR"
"""The directory of a job's compute factors (set by ``starpulse train`` for its ranks)."""
MAX_FACTOR = 1000.0


class StragglerError(ValueError):
    """A bad straggler setting: names the rank or factor and the allowed range."""

    is_user_error = True


def _check_rank(rank: int) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise StragglerError(f"rank {rank!r}: expected a rank >= 0")


def _read(directory: str | os.PathLike[str] | None, key: str, valid: Callable[[float], bool]) -> float:
    """The number stored under ``key`` if it is ``valid``, else 1.0 (also when there is no directory)."""
    if directory is None or not Path(directory).is_dir():
        return 1.0
    value = FileStore(directory).get(key)
    return float(value) if isinstance(value, int | float) and valid(value) else 1.0


def set_compute_factor(directory: str | os.PathLike[str], rank: int, factor: float) -> None:
    """Make ``rank`` compute ``factor`` times slower from its next step on (1.0 clears it)."""
    _check_rank(rank)
    if not 1.0 <= factor <= MAX_FACTOR:
        raise StragglerError(f"factor {factor!r}: expected 1..{MAX_FACTOR:g} (compute time x factor)")
    FileStore(directory).set(f"compute_factor/{rank}", float(factor))


def compute_factor(directory: str | os.PathLike[str] | None, rank: int) -> float:
    """The factor ``rank`` computes slower by now (1.0 when none was set or there is no directory)."""
    return _read(directory, f"compute_factor/{rank}", lambda v: v >= 1.0)


def set_nic_rate_share(directory: str | os.PathLike[str], rank: int, share: float) -> None:
    """Make ``rank``'s NIC pace its port at ``share`` (0 < share <= 1) of its line rate from its next step on
    (1.0 clears it)."""
    _check_rank(rank)
    if not 0.0 < share <= 1.0:
        raise StragglerError(f"NIC rate share {share!r}: expected 0 < share <= 1 (of the line rate)")
    FileStore(directory).set(f"nic_rate_share/{rank}", float(share))


def nic_rate_share(directory: str | os.PathLike[str] | None, rank: int) -> float:
    """The share of its line rate ``rank``'s NIC paces at now (1.0 when none was set or there is no directory)."""
    return _read(directory, f"nic_rate_share/{rank}", lambda v: 0.0 < v <= 1.0)


def parse_slow(text: str, world: int | None = None, flag: str = "--slow") -> tuple[int, float]:
    """``RANK:FACTOR`` (e.g. ``3:2.5``) as (rank, factor); one-line errors naming the flag and the range."""
    rank_s, sep, factor_s = text.partition(":")
    try:
        rank, factor = int(rank_s), float(factor_s)
    except ValueError:
        rank, factor = -1, 0.0
    if not sep or rank < 0 or (world is not None and rank >= world):
        top = f"0..{world - 1}" if world is not None else ">= 0"
        raise StragglerError(f"{flag} {text}: expected RANK:FACTOR with RANK in {top} and FACTOR in "
                             f"1..{MAX_FACTOR:g}")
    if not 1.0 <= factor <= MAX_FACTOR:
        raise StragglerError(f"{flag} {text}: FACTOR must be in 1..{MAX_FACTOR:g}")
    return rank, factor
