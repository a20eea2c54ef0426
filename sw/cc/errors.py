"""Errors of the congestion-control models: bad parameters are user errors (one clear line, no traceback)."""

from __future__ import annotations


class CcError(ValueError):
    """Base class of every error raised by ``sw.cc``; the CLI prints it as one line."""

    is_user_error = True


class CcParamError(CcError):
    """A parameter outside its allowed range; the message names the field, the value and the range."""


def check_range(model: str, field: str, value: object, lo: int | float, hi: int | float) -> None:
    """Raise :class:`CcParamError` unless ``lo <= value <= hi`` (and ``value`` is a number, bool excluded)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise CcParamError(f"{model}.{field}={value!r}: allowed range is {lo}..{hi}")


def check_int_range(model: str, field: str, value: object, lo: int, hi: int) -> None:
    """Like :func:`check_range` but the value must also be an ``int`` (the RTL registers are integers)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise CcParamError(f"{model}.{field}={value!r}: must be an integer in {lo}..{hi}")
    check_range(model, field, value, lo, hi)
