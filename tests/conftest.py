"""Shared pytest set-up: markers are declared in pyproject.toml; root-only tests skip clearly without root;
Ctrl-C behaves as in a terminal even when the suite was started from a background job; the collectives'
auto-tune tables go to a directory of the session, never the user's cache."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored across exec: the
    # Ctrl-C tests (a fabric torn down on SIGINT, the shell's Interrupt, `fabric down` ending an API script)
    # would then test nothing.  A handled signal is reset to the default on exec, so children get Python's own.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # A run with auto-tune on (train --compare's starpulse configuration) stores its table; tests leave no files
    # behind in ~/.cache, and the ranks they start inherit the variable.  Removed with the session's files.
    if "STARPULSE_AUTOTUNE_DIR" not in os.environ:
        tables = tempfile.TemporaryDirectory(prefix="starpulse-test-autotune-")
        config.add_cleanup(tables.cleanup)
        os.environ["STARPULSE_AUTOTUNE_DIR"] = tables.name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root for network namespaces")
    for item in items:
        if item.get_closest_marker("emu") or item.get_closest_marker("hil"):   # marks, not the folder tests/emu
            item.add_marker(skip)
