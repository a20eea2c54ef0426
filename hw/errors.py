"""Errors of the hw package: bad parameters and CLI input are user errors (one clear line, exit 2)."""

from __future__ import annotations


class HwError(Exception):
    """Base class of the hw package's errors; the CLI dispatcher prints it as one line."""

    is_user_error = True


class HwParamError(HwError, ValueError):
    """A block parameter or CLI value outside what the RTL supports; names the field, value and range."""
