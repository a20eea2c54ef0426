"""Shared pytest set-up: markers are declared in pyproject.toml; root-only tests skip clearly without root;
Ctrl-C behaves as in a terminal even when the suite was started from a background job; the collectives'
auto-tune tables go to a directory of the session, never the user's cache; the time dilation a test's fabric
chose never leaks into the tests after it."""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Iterator

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


def _restoring_dilation() -> Iterator[None]:
    """$STARPULSE_TIME_DILATION and the process's clock as they were before, afterwards.  A fabric brought up in
    the test process (``Fabric(...)``, calibrated by ``auto``) sets both, as ``fabric up`` does; left behind,
    every later fabric, wire and self-test would run at that dilation instead of choosing its own."""
    from sw.clock import ENV_DILATION, get_clock, set_clock

    clock, env = get_clock(), os.environ.get(ENV_DILATION)
    yield
    set_clock(clock)
    if env is None:
        os.environ.pop(ENV_DILATION, None)
    else:
        os.environ[ENV_DILATION] = env


@pytest.fixture(autouse=True, scope="module")
def _module_keeps_its_dilation() -> Iterator[None]:
    """Around a module (its module-scoped fabrics included)."""
    yield from _restoring_dilation()


@pytest.fixture(autouse=True)
def _test_keeps_its_dilation() -> Iterator[None]:
    """Around a test (a module's fabric, set up before, keeps its own for the module's other tests)."""
    yield from _restoring_dilation()
